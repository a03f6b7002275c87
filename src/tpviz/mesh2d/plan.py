"""The 2D-sharded MLP as a plan: every step's arrays, per-device shapes, collectives and bytes.

``Y = relu(X W₁) W₂`` with ``X[B, H₁]``, ``W₁[H₁, H₂]``, ``W₂[H₂, H₁]`` on a mesh of
``data × model`` devices (GSPMD paper, Xu et al. 2021; the Scaling Book's "mixed FSDP and model
parallelism"). Input and weights are sharded over *both* axes::

    X[B_data, H₁_model]   W₁[H₁_data, H₂_model]   W₂[H₂_model, H₁_data]

1. all-gather X along model      → X'[B_data, H₁]
2. all-gather W₁ along data      → W₁'[H₁, H₂_model]
3. H = X' W₁'  (local matmul)    → H[B_data, H₂_model]
4. A = relu(H) (local)
5. all-gather W₂ along data      → W₂'[H₂_model, H₁]
6. A W₂'       (local matmul)    → partial sums [B_data, H₁] over model
7. reduce-scatter along model    → Y[B_data, H₁_model], sharded like X

The backward pass runs the transposes: an all-gather of the output gradient along model and three
reduce-scatters (W₂ and W₁ gradients along data, X's gradient along model). No devices here.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from jax.sharding import PartitionSpec as P

from tpviz import cost, layout
from tpviz.errors import ShardingError

DATA, MODEL = "data", "model"
DIMS = {"X": ("B", "H₁"), "W₁": ("H₁", "H₂"), "W₂": ("H₂", "H₁")}
SPECS = {"X": P(DATA, MODEL), "W₁": P(DATA, MODEL), "W₂": P(MODEL, DATA)}  # the stored layouts


@dataclass(frozen=True)
class Array:
    """One array of the step table: global shape, sharding, and the block each device holds."""

    name: str
    dims: tuple[str, str]  # dimension names, e.g. ("B", "H₁")
    shape: tuple[int, int]
    spec: P
    local: tuple[int, int]
    partial: bool = False  # each device holds a partial sum over the model axis

    @property
    def notation(self) -> str:
        text = layout.to_notation(self.spec, name=self.name, dims=self.dims)
        return text + " {partial sums over model}" * self.partial


@dataclass(frozen=True)
class Step:
    """One step: an operation, its operands and result, and what it communicates per device."""

    what: str
    op: str  # "start", "all-gather", "matmul", "relu" or "reduce-scatter"
    axis: str | None  # the mesh axis a collective runs along
    group: int  # devices in each communicating group (1: nothing moves)
    operands: tuple[Array, ...]
    result: Array
    bytes: int  # a collective's result, per device (0 for compute)
    flops: int  # per device

    @property
    def communicates(self) -> bool:
        return self.op in ("all-gather", "reduce-scatter") and self.group > 1


@dataclass(frozen=True)
class Collective:
    """A collective the plan predicts: kind, mesh axis, devices per group, bytes per device of
    the result (as the compiled program reports them) and of the unreduced input."""

    kind: str
    axis: str
    group: int
    bytes: int
    full_bytes: int  # the array the collective moves: gathered result / unscattered input
    what: str

    @property
    def sent(self) -> float:
        """Bytes each device sends (ring): (n-1)/n of the full array."""
        return (self.group - 1) / self.group * self.full_bytes


@dataclass(frozen=True)
class Plan:
    batch: int
    h1: int
    h2: int
    mesh: dict[str, int]  # {"data": d, "model": m}
    dtype: str
    steps: tuple[Step, ...]

    @property
    def devices(self) -> int:
        return self.mesh[DATA] * self.mesh[MODEL]

    @property
    def shape(self) -> tuple[int, int]:
        """The mesh shape ``(data, model)``."""
        return self.mesh[DATA], self.mesh[MODEL]

    @property
    def itemsize(self) -> int:
        return layout.dtype_size(self.dtype)

    def collectives(self, training: bool = False) -> list[Collective]:
        """The forward pass's collectives; ``training=True`` adds the backward pass's
        (their transposes). Collectives over an axis of size 1 move nothing and are left out."""
        found = [Collective(s.op, s.axis, s.group, s.bytes, _full(s.op, s.bytes, s.group),
                            s.what) for s in self.steps if s.communicates]
        if training:
            (d, m), size = self.shape, self.itemsize
            b, h1, h2 = self.batch // d, self.h1, self.h2
            for kind, axis, local, what in (
                    ("all-gather", MODEL, (b, h1), "all-gather dY along model"),
                    ("reduce-scatter", DATA, (h2 // m, h1 // d), "reduce-scatter dW₂ along data"),
                    ("reduce-scatter", DATA, (h1 // d, h2 // m), "reduce-scatter dW₁ along data"),
                    ("reduce-scatter", MODEL, (b, h1 // m), "reduce-scatter dX along model")):
                n = self.mesh[axis]
                if n > 1:
                    nbytes = math.prod(local) * size
                    found.append(Collective(kind, axis, n, nbytes, _full(kind, nbytes, n), what))
        return found

    def sent(self, training: bool = True) -> float:
        """Bytes each device sends per step (ring algorithms)."""
        return sum(c.sent for c in self.collectives(training))

    def flops(self, training: bool = True) -> int:
        """FLOPs per device: two matmuls forward; the backward pass does twice as many."""
        forward = sum(s.flops for s in self.steps)
        return 3 * forward if training else forward

    @property
    def memory(self) -> Memory:
        return _memory(self.batch, self.h1, self.h2, *self.shape, self.itemsize)

    def rows(self) -> list[tuple]:
        """The step table: step, operation, result, per-device shape, collective, bytes."""
        return [(i, s.what, s.result.notation, "×".join(map(str, s.result.local)),
                 f"{s.op} over {s.axis} ({s.group} devices)" if s.communicates else
                 "none (axis of size 1)" if s.op in ("all-gather", "reduce-scatter") else "none",
                 s.bytes if s.communicates else 0) for i, s in enumerate(self.steps)]

    _HEAD = ("step", "operation", "result", "per device", "communication", "bytes per device")

    def __str__(self) -> str:
        rows = [tuple(map(str, r)) for r in [self._HEAD, *self.rows()]]
        width = [max(len(r[i]) for r in rows) for i in range(len(self._HEAD))]
        return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)).rstrip()
                         for r in rows)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in self._HEAD)
        def cell(v) -> str:  # subscripted mesh axes: X[B<sub>data</sub>, ...]
            text = f"{v:,}" if isinstance(v, int) else re.sub(r"_\{(\w+)\}", r"<sub>\1</sub>", v)
            return f"<td>{text}</td>"

        body = "".join("<tr>" + "".join(map(cell, r)) + "</tr>" for r in self.rows())
        return (f"<p>{describe(self)}</p><table><thead><tr>{head}</tr></thead>"
                f"<tbody>{body}</tbody></table>")


def _full(kind: str, nbytes: int, group: int) -> int:
    return nbytes if kind == "all-gather" else nbytes * group


@dataclass(frozen=True)
class Memory:
    """Bytes per device: the weight shards stored, the weights held while the MLP runs (stored +
    gathered), and the activations saved for the backward pass (the two matmuls' inputs)."""

    weights: int
    weights_held: int
    activations: int


def _memory(b: int, h1: int, h2: int, d: int, m: int, size: int) -> Memory:
    stored = 2 * h1 * h2 // (d * m) * size
    gathered = 2 * h1 * h2 // m * size if d > 1 else 0
    return Memory(stored, stored + gathered, (b // d * h1 + b // d * h2 // m) * size)


def mesh_shape(mesh) -> dict[str, int]:
    """``(d, m)``, ``{"data": d, "model": m}`` or a ``jax.sharding.Mesh`` → ``{"data": d,
    "model": m}``.

    Raises:
        ShardingError: another number of axes, or axis names other than "data" and "model".
    """
    if hasattr(mesh, "axis_names") and hasattr(mesh, "shape"):
        mesh = dict(mesh.shape)
    if isinstance(mesh, Mapping):
        if set(mesh) != {DATA, MODEL}:
            raise ShardingError(
                f"the 2D MLP needs a mesh with axes 'data' (splits the batch) and 'model' (splits "
                f"the hidden sizes); got axes {tuple(mesh)}. Make it with "
                "tpviz.make_mesh((d, m), ('data', 'model')).")
        shape = {DATA: mesh[DATA], MODEL: mesh[MODEL]}
    else:
        try:
            d, m = mesh
        except (TypeError, ValueError):
            raise ShardingError(f"a 2D mesh shape is (data, model), e.g. (4, 2); got {mesh!r}."
                                ) from None
        shape = {DATA: d, MODEL: m}
    if any(not isinstance(v, int) or v < 1 for v in shape.values()):
        raise ShardingError(f"mesh axis sizes must be positive integers, got {shape}.")
    return shape


def _check_sizes(batch: int, h1: int, h2: int, mesh: dict[str, int]) -> None:
    for name, value in (("batch", batch), ("h1", h1), ("h2", h2)):
        if not isinstance(value, int) or value < 1:
            raise ShardingError(f"{name} must be a positive integer, got {value!r}.")
    d, m = mesh[DATA], mesh[MODEL]
    for name, size, axis, n, why in (
            ("batch", batch, DATA, d, "X's rows are split over data"),
            ("h1", h1, MODEL, m, "X's columns are split over model"),
            ("h1", h1, DATA, d, "W₁'s rows and W₂'s columns are split over data"),
            ("h2", h2, MODEL, m, "W₁'s columns and W₂'s rows are split over model")):
        if size % n:
            raise ShardingError(
                f"{name} = {size} does not divide over the {axis} axis of size {n} ({why}). "
                f"Choose a mesh shape whose {axis} size divides {size}, or a {name} that is a "
                f"multiple of {n}.")


def plan(batch: int, h1: int, h2: int, mesh=(4, 2), dtype="float32") -> Plan:
    """The step table of the 2D-sharded MLP on a ``(data, model)`` mesh.

    Raises:
        ShardingError: a size does not divide over its mesh axis, or the mesh is not
            ``(data, model)``.
    """
    shape = mesh_shape(mesh)
    _check_sizes(batch, h1, h2, shape)
    size = layout.dtype_size(dtype)

    def array(name, dims, full, spec, partial=False):
        local = list(layout.shard_shape(full, spec, shape))
        return Array(name, dims, tuple(full), spec, tuple(local), partial)

    x = array("X", DIMS["X"], (batch, h1), SPECS["X"])
    w1 = array("W₁", DIMS["W₁"], (h1, h2), SPECS["W₁"])
    w2 = array("W₂", DIMS["W₂"], (h2, h1), SPECS["W₂"])
    xg = array("X'", DIMS["X"], (batch, h1), P(DATA, None))
    w1g = array("W₁'", DIMS["W₁"], (h1, h2), P(None, MODEL))
    h = array("H", ("B", "H₂"), (batch, h2), P(DATA, MODEL))
    a = array("A", ("B", "H₂"), (batch, h2), P(DATA, MODEL))
    w2g = array("W₂'", DIMS["W₂"], (h2, h1), P(MODEL, None))
    partial = array("Y'", DIMS["X"], (batch, h1), P(DATA, None), partial=True)
    y = array("Y", DIMS["X"], (batch, h1), SPECS["X"])

    def step(what, op, axis, operands, result, flops=0):
        group = shape[axis] if axis else 1
        nbytes = math.prod(result.local) * size if axis else 0
        return Step(what, op, axis, group, operands, result, nbytes, flops)

    matmul = 2 * xg.local[0] * xg.local[1] * w1g.local[1]  # both matmuls: 2 B/d H₁ H₂/m
    steps = (
        step("start: X, W₁, W₂ sharded over both axes", "start", None, (x, w1, w2), x),
        step("all-gather X along model", "all-gather", MODEL, (x,), xg),
        step("all-gather W₁ along data", "all-gather", DATA, (w1,), w1g),
        step("H = X' W₁' (local matmul)", "matmul", None, (xg, w1g), h, matmul),
        step("A = relu(H) (local)", "relu", None, (h,), a),
        step("all-gather W₂ along data", "all-gather", DATA, (w2,), w2g),
        step("Y' = A W₂' (local matmul, partial sums)", "matmul", None, (a, w2g), partial, matmul),
        step("reduce-scatter Y' along model", "reduce-scatter", MODEL, (partial,), y),
    )
    return Plan(batch, h1, h2, shape, str(layout.dtype_of(dtype)), steps)


def describe(p: Plan) -> str:
    d, m = p.shape
    return (f"{p.devices} devices as data={d} × model={m}; B = {p.batch:,}, H₁ = {p.h1:,}, "
            f"H₂ = {p.h2:,} ({p.dtype})")


# --- comparison with data parallelism and 1D Megatron --------------------------------------------

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
    _check_sizes(batch, h1, h2, {DATA: devices, MODEL: 1})
    size = layout.dtype_size(dtype)
    grads = 2 * h1 * h2 * size
    c = Collective("all-reduce", DATA, devices, grads, grads, "all-reduce the gradients")
    sent = 2 * (devices - 1) / devices * grads
    memory = Memory(grads, grads, (batch // devices * (h1 + h2)) * size)
    return Scheme("data parallel", (devices, 1), memory, 0.0, sent, (c,) * (devices > 1))


def megatron_1d(batch: int, h1: int, h2: int, devices: int, dtype="float32") -> Scheme:
    """Megatron-LM: X replicated, W₁ by columns, W₂ by rows; one all-reduce of Y forward and
    one of X's gradient backward (B H₁ elements each)."""
    _check_sizes(batch, h1, h2, {DATA: 1, MODEL: devices})
    size = layout.dtype_size(dtype)
    out = batch * h1 * size
    c = Collective("all-reduce", MODEL, devices, out, out, "all-reduce Y / dX")
    sent = 2 * (devices - 1) / devices * out
    memory = Memory(2 * h1 * h2 // devices * size, 2 * h1 * h2 // devices * size,
                    (batch * h1 + batch * h2 // devices) * size)
    return Scheme("1D Megatron", (1, devices), memory, sent, 2 * sent, (c,) * 2 * (devices > 1))


def mesh_2d(batch: int, h1: int, h2: int, mesh, dtype="float32") -> Scheme:
    p = plan(batch, h1, h2, mesh, dtype)
    d, m = p.shape
    return Scheme(f"2D {d}×{m}", (d, m), p.memory, p.sent(False), p.sent(True),
                  tuple(p.collectives(True)))


def meshes(batch: int, h1: int, h2: int, devices: int) -> list[tuple[int, int]]:
    """Every ``(data, model)`` shape of ``devices`` devices that divides the sizes."""
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
    span = mesh[MODEL] if axis == MODEL else mesh[DATA] * mesh[MODEL]
    if system.node and span > system.node:
        return system.between_nodes
    return system.bandwidth


def step_time(p: Plan, system: cost.System, training: bool = True) -> cost.Estimate:
    """Seconds per step: FLOPs at peak versus the collectives at their axis's bandwidth."""
    comm = sum(cost.collective_time(c.kind, c.full_bytes, axis_bandwidth(system, p.mesh, c.axis))
               for c in p.collectives(training))
    return cost.Estimate(p.flops(training) / system.flops, comm)


def best_mesh(batch: int, h1: int, h2: int, devices: int = 8, system: cost.System | None = None,
              dtype="bf16") -> tuple[int, int]:
    """The ``(data, model)`` shape with the least communication per training step: the fewest
    bytes sent per device, or with ``system``, the shortest communication time."""
    shapes = meshes(batch, h1, h2, devices)
    if not shapes:
        raise ShardingError(f"no (data, model) mesh of {devices} devices divides B = {batch}, "
                            f"H₁ = {h1}, H₂ = {h2}.")

    def comm(shape):
        p = plan(batch, h1, h2, shape, dtype)
        return step_time(p, system).comm_s if system else p.sent(True)

    return min(shapes, key=comm)


def smallest_batch_per_device(h2: int, system: cost.System) -> float:
    """The Scaling Book's bound for mixed FSDP + model parallelism with one mesh axis each: the
    step stays compute-bound only while B / N > 4 α² / H₂, with α = C / W."""
    alpha = system.flops / system.bandwidth
    return 4 * alpha**2 / h2
