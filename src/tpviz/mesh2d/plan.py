"""The 2D-sharded MLP as a plan: every step's arrays, per-device shapes, collectives and bytes.

``Out = relu(In W₁) W₂`` with ``In[B, D]``, ``W₁[D, F]``, ``W₂[F, D]`` (the notation page's
names: D the model width, F the FFN width) on a mesh of ``data × model`` devices (the mesh axes
X and Y of the notation; GSPMD paper, Xu et al. 2021; the Scaling Book's "mixed FSDP and model
parallelism"). Input and weights are sharded over *both* axes::

    In[B_data, D_model]   W₁[D_data, F_model]   W₂[F_model, D_data]

1. all-gather In along model      → In'[B_data, D]
2. all-gather W₁ along data       → W₁'[D, F_model]
3. In'W₁' (local matmul)          → In'W₁'[B_data, F_model], before the nonlinearity
4. Tmp = relu(In'W₁') (local)
5. all-gather W₂ along data       → W₂'[F_model, D]
6. Tmp W₂'     (local matmul)     → Out'[B_data, D], partial sums over model
7. reduce-scatter along model     → Out[B_data, D_model], sharded like In

The backward pass runs the transposes: an all-gather of the output gradient along model and three
reduce-scatters (W₂ and W₁ gradients along data, In's gradient along model). No devices here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from jax.sharding import PartitionSpec as P

from tpviz.core import layout, validate
from tpviz.core.collectives import Collective, Collectives, html_table, text_table
from tpviz.core.kinds import Dtype, MeshShape, Of, Sizes
from tpviz.core.notation import to_notation
from tpviz.errors import ShardingError

DATA, MODEL = "data", "model"
DIMS = {"In": ("B", "D"), "W₁": ("D", "F"), "W₂": ("F", "D")}
SPECS = {"In": P(DATA, MODEL), "W₁": P(DATA, MODEL), "W₂": P(MODEL, DATA)}  # the stored layouts
PRE = "In'W₁'"  # the first matmul's result, before the nonlinearity


@dataclass(frozen=True)
class Array:
    """One array of the step table: global shape, sharding, and the block each device holds."""

    name: str
    dims: tuple[str, str]  # dimension names, e.g. ("B", "D")
    shape: tuple[int, int]
    spec: P
    local: tuple[int, int]
    partial: bool = False  # each device holds a partial sum over the model axis

    @property
    def notation(self) -> str:
        text = to_notation(self.spec, name=self.name, dims=self.dims)
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
class Plan:
    batch: int
    hidden: int  # D
    ffn: int  # F
    mesh: dict[str, int]  # {"data": N_X, "model": N_Y}
    dtype: str
    steps: tuple[Step, ...]

    @property
    def devices(self) -> int:
        return self.mesh[DATA] * self.mesh[MODEL]

    @property
    def mesh_sizes(self) -> tuple[int, int]:
        """The mesh shape ``(data, model)``."""
        return self.mesh[DATA], self.mesh[MODEL]

    @property
    def itemsize(self) -> int:
        return layout.dtype_size(self.dtype)

    def collectives(self, training: bool = False) -> Collectives:
        """The forward pass's collectives; ``training=True`` adds the backward pass's
        (their transposes). Collectives over an axis of size 1 move nothing and are left out."""
        found = Collectives(
            Collective(s.op, s.bytes, s.group, self.dtype, s.result.local, (s.axis,), what=s.what)
            for s in self.steps if s.communicates)
        if training:
            (nx, ny), size = self.mesh_sizes, self.itemsize
            b, d, f = self.batch // nx, self.hidden, self.ffn
            for kind, axis, local, what in (
                    ("all-gather", MODEL, (b, d), "all-gather dOut along model"),
                    ("reduce-scatter", DATA, (f // ny, d // nx), "reduce-scatter dW₂ along data"),
                    ("reduce-scatter", DATA, (d // nx, f // ny), "reduce-scatter dW₁ along data"),
                    ("reduce-scatter", MODEL, (b, d // ny), "reduce-scatter dIn along model")):
                n = self.mesh[axis]
                if n > 1:
                    found.append(Collective(kind, math.prod(local) * size, n, self.dtype, local,
                                            (axis,), what=what))
        return found

    @property
    def fsdp(self) -> str:
        """The data axis's FSDP schedule, by name: W₁ and W₂ are gathered once in the forward
        pass and kept for the backward pass (:func:`tpviz.zero.plan.fsdp_collectives` with
        ``reshard_after_forward=False``: 2 (N-1)/N of the weights' bytes, not ZeRO-3's 3)."""
        return "reshard_after_forward=False"

    def sent(self, training: bool = True) -> float:
        """Bytes each device sends per step (ring algorithms)."""
        return self.collectives(training).sent_bytes()

    def flops(self, training: bool = True) -> int:
        """FLOPs per device: two matmuls forward; the backward pass does twice as many."""
        forward = sum(s.flops for s in self.steps)
        return 3 * forward if training else forward

    @property
    def memory(self) -> Memory:
        return _memory(self.batch, self.hidden, self.ffn, *self.mesh_sizes, self.itemsize)

    def rows(self) -> list[tuple]:
        """The step table: step, operation, result, per-device shape, collective, bytes."""
        return [(i, s.what, s.result.notation, "×".join(map(str, s.result.local)),
                 f"{s.op} over {s.axis} ({s.group} devices)" if s.communicates else
                 "none (axis of size 1)" if s.op in ("all-gather", "reduce-scatter") else "none",
                 s.bytes if s.communicates else 0) for i, s in enumerate(self.steps)]

    _HEAD = ("step", "operation", "result", "per device", "communication", "bytes per device")

    def __str__(self) -> str:
        return text_table(self._HEAD, self.rows())

    def _repr_html_(self) -> str:
        def subscripts(v: str) -> str:  # subscripted mesh axes: In[B<sub>data</sub>, ...]
            return re.sub(r"_\{(\w+)\}", r"<sub>\1</sub>", v)

        return f"<p>{describe(self)}</p>" + html_table(self._HEAD, self.rows(), subscripts)


@dataclass(frozen=True)
class Memory:
    """Bytes per device: the weight shards stored, the weights held while the MLP runs (stored +
    gathered), and the activations saved for the backward pass (the two matmuls' inputs)."""

    weights: int
    weights_held: int
    activations: int


def _memory(b: int, d: int, f: int, nx: int, ny: int, size: int) -> Memory:
    stored = 2 * d * f // (nx * ny) * size
    gathered = 2 * d * f // ny * size if nx > 1 else 0
    return Memory(stored, stored + gathered, (b // nx * d + b // nx * f // ny) * size)


def mesh_shape(mesh) -> dict[str, int]:
    """``(N_X, N_Y)``, ``{"data": N_X, "model": N_Y}`` or a ``jax.sharding.Mesh`` →
    ``{"data": N_X, "model": N_Y}``.

    Raises:
        ShardingError: another number of axes, or axis names other than "data" and "model".
    """
    if hasattr(mesh, "axis_names") and hasattr(mesh, "shape"):
        mesh = dict(mesh.shape)
    if isinstance(mesh, Mapping):
        if set(mesh) != {DATA, MODEL}:
            raise ShardingError(
                f"the 2D MLP needs a mesh with axes 'data' (splits the batch) and 'model' (splits "
                f"the widths D and F); got axes {tuple(mesh)}. Make it with "
                "tpviz.make_mesh((n_x, n_y), ('data', 'model')).")
        shape = {DATA: mesh[DATA], MODEL: mesh[MODEL]}
    else:
        try:
            nx, ny = mesh
        except (TypeError, ValueError):
            raise ShardingError(f"a 2D mesh shape is (data, model), e.g. (4, 2); got {mesh!r}."
                                ) from None
        shape = {DATA: nx, MODEL: ny}
    shape = {axis: validate.integer(f"mesh[{axis!r}]", v, error=ShardingError)
             for axis, v in shape.items()}
    return shape


def check_sizes(batch: int, hidden: int, ffn: int, mesh: dict[str, int]) -> None:
    for name, value in (("batch", batch), ("hidden", hidden), ("ffn", ffn)):
        validate.integer(name, value, error=ShardingError)
    nx, ny = mesh[DATA], mesh[MODEL]
    for name, size, axis, n, why in (
            ("batch", batch, DATA, nx, "In's rows are split over data"),
            ("hidden", hidden, MODEL, ny, "In's columns (D) are split over model"),
            ("hidden", hidden, DATA, nx, "W₁'s rows and W₂'s columns (D) are split over data"),
            ("ffn", ffn, MODEL, ny, "W₁'s columns and W₂'s rows (F) are split over model")):
        if size % n:
            raise ShardingError(
                f"{name} = {size} does not divide over the {axis} axis of size {n} ({why}). "
                f"Choose a mesh shape whose {axis} size divides {size}, or a {name} that is a "
                f"multiple of {n}.")


def plan(batch: int, hidden: int, ffn: int, mesh: Of(Sizes(), MeshShape) = (4, 2),
         dtype: Dtype = "float32") -> Plan:
    """The step table of the 2D-sharded MLP on a ``(data, model)`` mesh: batch B, model width
    D = ``hidden``, FFN width F = ``ffn``.

    Raises:
        ShardingError: a size does not divide over its mesh axis, or the mesh is not
            ``(data, model)``.
    """
    shape = mesh_shape(mesh)
    batch, hidden, ffn = (validate.integer(name, value, error=ShardingError)
                          for name, value in (("batch", batch), ("hidden", hidden), ("ffn", ffn)))
    check_sizes(batch, hidden, ffn, shape)
    size = layout.dtype_size(dtype)

    def array(name, dims, full, spec, partial=False):
        local = list(layout.shard_shape(full, spec, shape))
        return Array(name, dims, tuple(full), spec, tuple(local), partial)

    x = array("In", DIMS["In"], (batch, hidden), SPECS["In"])
    w1 = array("W₁", DIMS["W₁"], (hidden, ffn), SPECS["W₁"])
    w2 = array("W₂", DIMS["W₂"], (ffn, hidden), SPECS["W₂"])
    xg = array("In'", DIMS["In"], (batch, hidden), P(DATA, None))
    w1g = array("W₁'", DIMS["W₁"], (hidden, ffn), P(None, MODEL))
    h = array(PRE, ("B", "F"), (batch, ffn), P(DATA, MODEL))
    a = array("Tmp", ("B", "F"), (batch, ffn), P(DATA, MODEL))
    w2g = array("W₂'", DIMS["W₂"], (ffn, hidden), P(MODEL, None))
    partial = array("Out'", DIMS["In"], (batch, hidden), P(DATA, None), partial=True)
    y = array("Out", DIMS["In"], (batch, hidden), SPECS["In"])

    def step(what, op, axis, operands, result, flops=0):
        group = shape[axis] if axis else 1
        nbytes = math.prod(result.local) * size if axis else 0
        return Step(what, op, axis, group, operands, result, nbytes, flops)

    matmul = 2 * xg.local[0] * xg.local[1] * w1g.local[1]  # both matmuls: 2 B/N_X D F/N_Y
    steps = (
        step("start: In, W₁, W₂ sharded over both axes", "start", None, (x, w1, w2), x),
        step("all-gather In along model", "all-gather", MODEL, (x,), xg),
        step("all-gather W₁ along data", "all-gather", DATA, (w1,), w1g),
        step(f"{PRE} (local matmul)", "matmul", None, (xg, w1g), h, matmul),
        step(f"Tmp = relu({PRE}) (local)", "relu", None, (h,), a),
        step("all-gather W₂ along data", "all-gather", DATA, (w2,), w2g),
        step("Out' = Tmp W₂' (local matmul, partial sums)", "matmul", None, (a, w2g), partial,
             matmul),
        step("reduce-scatter Out' along model", "reduce-scatter", MODEL, (partial,), y),
    )
    return Plan(batch, hidden, ffn, shape, str(layout.dtype_of(dtype)), steps)


def describe(p: Plan) -> str:
    nx, ny = p.mesh_sizes
    return (f"{p.devices} devices as data={nx} × model={ny}; B = {p.batch:,}, D = {p.hidden:,}, "
            f"F = {p.ffn:,} ({p.dtype})")
