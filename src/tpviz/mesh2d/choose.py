"""Choosing a 2D mesh: the 2D MLP beside data parallelism and 1D Megatron, and its step time.

Plan level, like :mod:`tpviz.mesh2d.plan`: bytes and seconds from formulas, no devices.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from tpviz.core import cost, layout, validate
from tpviz.core.collectives import Collective
from tpviz.errors import ShardingError
from tpviz.mesh2d.plan import DATA, MODEL, Memory, Plan, check_sizes, plan


@dataclass(frozen=True)
class Scheme:
    """One way to run the MLP on N devices: memory and bytes sent per device."""

    name: str
    mesh: tuple[int, int]  # (data, model)
    memory: Memory
    forward_sent: float
    step_sent: float  # forward + backward
    collectives: tuple[Collective, ...]  # of a training step


def data_parallel(batch: int, h1: int, h2: int, devices: int, dtype="float32") -> Scheme:
    """Weights replicated, the batch split: no forward communication, one all-reduce of the
    gradients (2 H₁ H₂ elements) per step."""
    check_sizes(batch, h1, h2, {DATA: devices, MODEL: 1})
    size = layout.dtype_size(dtype)
    grads = 2 * h1 * h2 * size
    c = Collective("all-reduce", grads, devices, str(layout.dtype_of(dtype)), axes=(DATA,),
                   what="all-reduce the gradients")
    sent = c.sent_bytes
    memory = Memory(grads, grads, (batch // devices * (h1 + h2)) * size)
    return Scheme("data parallel", (devices, 1), memory, 0.0, sent, (c,) * (devices > 1))


def megatron_1d(batch: int, h1: int, h2: int, devices: int, dtype="float32") -> Scheme:
    """Megatron-LM: X replicated, W₁ by columns, W₂ by rows; one all-reduce of Y forward and
    one of X's gradient backward (B H₁ elements each)."""
    check_sizes(batch, h1, h2, {DATA: 1, MODEL: devices})
    size = layout.dtype_size(dtype)
    out = batch * h1 * size
    c = Collective("all-reduce", out, devices, str(layout.dtype_of(dtype)), axes=(MODEL,),
                   what="all-reduce Y / dX")
    sent = c.sent_bytes
    memory = Memory(2 * h1 * h2 // devices * size, 2 * h1 * h2 // devices * size,
                    (batch * h1 + batch * h2 // devices) * size)
    return Scheme("1D Megatron", (1, devices), memory, sent, 2 * sent, (c,) * 2 * (devices > 1))


def mesh_2d(batch: int, h1: int, h2: int, mesh, dtype="float32") -> Scheme:
    p = plan(batch, h1, h2, mesh, dtype)
    d, m = p.mesh_sizes
    return Scheme(f"2D {d}×{m}", (d, m), p.memory, p.sent(False), p.sent(True),
                  tuple(p.collectives(True)))


MAX_DEVICES = 1 << 20  # meshes() tries every data-axis size up to it


def meshes(batch: int, h1: int, h2: int, devices: int) -> list[tuple[int, int]]:
    """Every ``(data, model)`` shape of ``devices`` devices that divides the sizes."""
    batch, h1, h2 = (validate.integer(n, v) for n, v in (("batch", batch), ("h1", h1),
                                                          ("h2", h2)))
    devices = validate.integer("devices", devices, maximum=MAX_DEVICES,
                               fix="The search tries every divisor of it.")
    out = []
    for d in range(1, devices + 1):
        if devices % d == 0:
            m = devices // d
            if batch % d == 0 and h1 % d == 0 and h1 % m == 0 and h2 % m == 0:
                out.append((d, m))
    return out


def compare(batch: int, h1: int, h2: int, devices: int = 8, dtype="float32") -> list[Scheme]:
    """Data parallelism, 1D Megatron and every 2D mesh shape that fits, on the same devices."""
    found = []
    for make in (data_parallel, megatron_1d):
        with contextlib.suppress(ShardingError):  # it cannot split these sizes so many ways
            found.append(make(batch, h1, h2, devices, dtype))
    found += [mesh_2d(batch, h1, h2, s, dtype) for s in meshes(batch, h1, h2, devices)]
    if not found:
        raise ShardingError(f"no way to split B = {batch}, H₁ = {h1}, H₂ = {h2} over {devices} "
                            "devices; use sizes that are multiples of the device count.")
    return found


# --- time: compute versus communication (the Scaling Book's condition) ---------------------------

def axis_bandwidth(system: cost.System, mesh: dict[str, int], axis: str) -> float:
    """Bandwidth of one mesh axis. Devices are numbered row-major over (data, model): a model
    group spans ``m`` consecutive devices, a data group ``d·m``. A group that fits in one node
    uses the fast link; one that spans nodes, the link between nodes."""
    system = cost.system(system)
    span = mesh[MODEL] if axis == MODEL else mesh[DATA] * mesh[MODEL]
    if system.node and span > system.node:
        return system.between_nodes
    return system.bandwidth


def step_time(p: Plan, system: cost.System, training: bool = True) -> cost.Estimate:
    """Seconds per step: FLOPs at peak versus the collectives at their axis's bandwidth."""
    system = cost.system(system)
    comm = sum(c.time(axis_bandwidth(system, p.mesh, c.axes[0]), system.latency)
               for c in p.collectives(training))
    return cost.Estimate(p.flops(training) / system.flops, comm)


def best_mesh(batch: int, h1: int, h2: int, devices: int = 8, system: cost.System | None = None,
              dtype="bf16") -> tuple[int, int]:
    """The ``(data, model)`` shape with the least communication per training step: the fewest
    bytes sent per device, or with ``system``, the shortest communication time."""
    system = None if system is None else cost.system(system)
    shapes = meshes(batch, h1, h2, devices)
    if not shapes:
        raise ShardingError(f"no (data, model) mesh of {devices} devices divides B = {batch}, "
                            f"H₁ = {h1}, H₂ = {h2}.")

    def comm(shape):
        p = plan(batch, h1, h2, shape, dtype)
        return step_time(p, system).comm_s if system else p.sent(True)

    costs = [comm(s) for s in shapes]
    least = min(costs)  # ties (within rounding): the first, with the smallest data axis
    return next(s for s, c in zip(shapes, costs, strict=True) if c <= least * (1 + 1e-9))


def smallest_batch_per_device(h2: int, system: cost.System) -> float:
    """The Scaling Book's bound for mixed FSDP + model parallelism with one mesh axis each: the
    step stays compute-bound only while B / N > 4 (R/W)² / F, with R the peak FLOP/s and W the
    bandwidth of one device (the book's notation; the Scaling Book writes C and α = C / W)."""
    system = cost.system(system)
    ratio = system.flops / system.bandwidth  # R / W, FLOPs per byte sent
    return 4 * ratio**2 / h2
