"""Choosing a 2D mesh: the 2D MLP beside data parallelism and 1D Megatron, and its step time.

Plan level, like :mod:`tpviz.mesh2d.plan`: bytes and seconds from formulas, no devices.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from tpviz.core import cost, layout, validate
from tpviz.core import hardware as hw
from tpviz.core.collectives import Collective
from tpviz.core.kinds import Devices, Dtype, SystemLike
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


def data_parallel(batch: int, hidden: int, ffn: int, devices: Devices, dtype: Dtype = "float32"
                  ) -> Scheme:
    """Weights replicated, the batch split: no forward communication, one all-reduce of the
    gradients (2 D F elements) per step."""
    check_sizes(batch, hidden, ffn, {DATA: devices, MODEL: 1})
    size = layout.dtype_size(dtype)
    grads = 2 * hidden * ffn * size
    c = Collective("all-reduce", grads, devices, str(layout.dtype_of(dtype)), axes=(DATA,),
                   what="all-reduce the gradients")
    sent = c.sent_bytes
    memory = Memory(grads, grads, (batch // devices * (hidden + ffn)) * size)
    return Scheme("data parallel", (devices, 1), memory, 0.0, sent, (c,) * (devices > 1))


def megatron_1d(batch: int, hidden: int, ffn: int, devices: Devices, dtype: Dtype = "float32"
                ) -> Scheme:
    """Megatron-LM: In replicated, W₁ by columns, W₂ by rows; one all-reduce of Out forward and
    one of In's gradient backward (B D elements each)."""
    check_sizes(batch, hidden, ffn, {DATA: 1, MODEL: devices})
    size = layout.dtype_size(dtype)
    out = batch * hidden * size
    c = Collective("all-reduce", out, devices, str(layout.dtype_of(dtype)), axes=(MODEL,),
                   what="all-reduce Out / dIn")
    sent = c.sent_bytes
    memory = Memory(2 * hidden * ffn // devices * size, 2 * hidden * ffn // devices * size,
                    (batch * hidden + batch * ffn // devices) * size)
    return Scheme("1D Megatron", (1, devices), memory, sent, 2 * sent, (c,) * 2 * (devices > 1))


def mesh_2d(batch: int, hidden: int, ffn: int, mesh, dtype="float32") -> Scheme:
    p = plan(batch, hidden, ffn, mesh, dtype)
    nx, ny = p.mesh_sizes
    return Scheme(f"2D {nx}×{ny}", (nx, ny), p.memory, p.sent(False), p.sent(True),
                  tuple(p.collectives(True)))


MAX_DEVICES = 1 << 20  # meshes() tries every data-axis size up to it


def meshes(batch: int, hidden: int, ffn: int, devices: Devices) -> list[tuple[int, int]]:
    """Every ``(data, model)`` shape of ``devices`` devices that divides the sizes."""
    batch, hidden, ffn = (validate.integer(n, v) for n, v in (("batch", batch), ("hidden", hidden),
                                                              ("ffn", ffn)))
    devices = validate.integer("devices", devices, maximum=MAX_DEVICES,
                               fix="The search tries every divisor of it.")
    out = []
    for nx in range(1, devices + 1):
        if devices % nx == 0:
            ny = devices // nx
            if batch % nx == 0 and hidden % nx == 0 and hidden % ny == 0 and ffn % ny == 0:
                out.append((nx, ny))
    return out


def compare(batch: int, hidden: int, ffn: int, devices: Devices = 8, dtype: Dtype = "float32"
            ) -> list[Scheme]:
    """Data parallelism, 1D Megatron and every 2D mesh shape that fits, on the same devices."""
    found = []
    for make in (data_parallel, megatron_1d):
        with contextlib.suppress(ShardingError):  # it cannot split these sizes so many ways
            found.append(make(batch, hidden, ffn, devices, dtype))
    found += [mesh_2d(batch, hidden, ffn, s, dtype) for s in meshes(batch, hidden, ffn, devices)]
    if not found:
        raise ShardingError(f"no way to split B = {batch}, D = {hidden}, F = {ffn} over {devices} "
                            "devices; use sizes that are multiples of the device count.")
    return found


# --- time: compute versus communication (the Scaling Book's condition) ---------------------------

def per_node(system: cost.System, mesh: dict[str, int], axis: str) -> int | None:
    """Devices of one ``axis`` group inside one node. Devices are numbered row-major over
    (data, model): a model group is ``N_Y`` consecutive devices, a data group ``N_X`` devices
    ``N_Y`` apart (None on a TPU, whose groups run along torus axes)."""
    if not system.node or system.tpu:
        return None
    nx, ny = mesh[DATA], mesh[MODEL]
    if axis == MODEL:
        return min(ny, system.node)
    return min(nx, max(1, system.node // ny))


def axis_bandwidth(system: cost.System, mesh: dict[str, int], axis: str) -> float:
    """The bandwidth term's W of one mesh axis, as :mod:`tpviz.core.hardware` prices it: for a
    group inside one node its NVLink, for one across nodes the NICs of its devices in a node."""
    system = cost.system(system)
    n = mesh[axis]
    c = Collective("all-gather", 1 << 30, n)
    price = system.price(c, per_node(system, mesh, axis))
    return (n - 1) / n * c.bytes / price.bandwidth_s if n > 1 else system.bandwidth


def step_time(p: Plan, system: SystemLike, training: bool = True) -> cost.Estimate:
    """Seconds per step: FLOPs at peak versus the collectives, each priced by
    :mod:`tpviz.core.hardware` on its axis. The two axes use different links (torus axes; NVLink
    and NICs), so their communication overlaps: the step waits for the slower axis, as the
    Scaling Book assumes for mixed FSDP + tensor parallelism."""
    system = cost.system(system)
    per_axis = {DATA: 0.0, MODEL: 0.0}
    for c in p.collectives(training):
        axis = c.axes[0]
        per_axis[axis] += system.price(c, per_node(system, p.mesh, axis)).seconds
    return cost.Estimate(p.flops(training) / system.flops, max(per_axis.values()))


def best_mesh(batch: int, hidden: int, ffn: int, devices: Devices = 8,
              system: cost.System | None = None, dtype: Dtype = "bf16") -> tuple[int, int]:
    """The ``(data, model)`` shape with the least communication per training step: the fewest
    bytes sent per device, or with ``system``, the shortest communication time."""
    system = None if system is None else cost.system(system)
    shapes = meshes(batch, hidden, ffn, devices)
    if not shapes:
        raise ShardingError(f"no (data, model) mesh of {devices} devices divides B = {batch}, "
                            f"D = {hidden}, F = {ffn}.")

    def comm(shape):
        p = plan(batch, hidden, ffn, shape, dtype)
        return step_time(p, system).comm_s if system else p.sent(True)

    costs = [comm(s) for s in shapes]
    least = min(costs)  # ties (within rounding): the first, with the smallest data axis
    return next(s for s, c in zip(shapes, costs, strict=True) if c <= least * (1 + 1e-9))


def smallest_batch_per_device(ffn: int, system: SystemLike, axes_x: int = 1,
                              axes_y: int = 1) -> float:
    """The Scaling Book's current bound for mixed FSDP + model parallelism: the step stays
    compute-bound only while B / N > (R/W)² / (M_X · M_Y · F), with R the peak FLOP/s, W the
    bandwidth of one device over an axis and M_X, M_Y the torus axes of the data and model axes
    (:func:`tpviz.core.hardware.mixed_batch`, where the derivation is; the Scaling Book writes C
    and α = C / W). It assumes the two axes' communication overlaps (:func:`step_time`)."""
    system = cost.system(system)
    return hw.mixed_batch(system.flops, system.bandwidth, ffn, axes_x, axes_y)
