"""Sharded matrix multiplication Y[B, F] = X[B, D] · W[D, F]: plan, run, check.

The four cases of the Scaling Book (D is the contracting dimension):

1. neither operand is sharded along D: each device multiplies its blocks, no communication;
2. one operand is sharded along D: all-gather it along D first, then multiply locally;
3. both are sharded along D (over the same mesh axes): each device computes a partial sum
   ``Y[B, F]{U_axes}``, then an all-reduce adds them (or a reduce-scatter, leaving Y sharded);
4. the non-contracting dimensions B and F are sharded over the same mesh axis: invalid, one
   operand must be gathered along that axis first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from tpviz import hlo, layout
from tpviz.errors import ShardingError
from tpviz.layout import MeshShape, axes_of


@dataclass(frozen=True)
class PlannedCollective:
    """A collective the plan predicts, sized as :class:`tpviz.hlo.Collective` reports it."""

    kind: str
    axes: tuple[str, ...]
    bytes: int  # per-device bytes of the result
    group_size: int
    what: str  # which array moves, in words

    @property
    def full_bytes(self) -> int:
        """V of the cost model: bytes of the whole array the group gathers or reduces."""
        n = self.group_size
        return {"all-gather": self.bytes, "reduce-scatter": self.bytes * n,
                "all-reduce": self.bytes}[self.kind]


@dataclass(frozen=True)
class MatmulPlan:
    """How ``X[B, D] · W[D, F]`` runs for the given shardings over a mesh (no devices involved).

    Attributes:
        case: 1, 2 or 3 (case 4 raises).
        x_spec, w_spec, y_spec: the shardings of X, W and of the result Y.
        x_block, w_block, y_block: per-device shapes as stored (Y: as returned).
        flops: floating-point operations per device (2 per multiply-add).
        collectives: what moves, in order.
    """

    x_shape: tuple[int, int]
    w_shape: tuple[int, int]
    dtype: str
    mesh_shape: dict[str, int]
    x_spec: PartitionSpec
    w_spec: PartitionSpec
    y_spec: PartitionSpec
    case: int
    x_block: tuple[int, ...]
    w_block: tuple[int, ...]
    y_block: tuple[int, ...]
    flops: int
    collectives: tuple[PlannedCollective, ...]
    reduce_scatter: bool

    def describe(self) -> str:
        """One paragraph in the notation: what each device does."""
        x = layout.to_notation(self.x_spec, "X", ("B", "D"))
        w = layout.to_notation(self.w_spec, "W", ("D", "F"))
        y = layout.to_notation(self.y_spec, "Y", ("B", "F"))
        steps = {1: "no communication: each device multiplies its own blocks",
                 2: "all-gather the operand sharded along D, then multiply locally",
                 3: "multiply locally into partial sums, then "
                    + ("reduce-scatter" if self.reduce_scatter else "all-reduce") + " them"}
        return f"case {self.case}: {x} · {w} → {y}: {steps[self.case]}."


def _entry(spec: PartitionSpec, i: int):
    return spec[i] if i < len(spec) else None


def _size(mesh_shape: MeshShape, axes: Sequence[str]) -> int:
    return math.prod(mesh_shape[a] for a in axes)


def plan(x_shape: Sequence[int], w_shape: Sequence[int], x_spec, w_spec,
         mesh_shape: MeshShape, *, dtype="float32", reduce_scatter: bool = False) -> MatmulPlan:
    """Plan ``X[B, D] · W[D, F]`` for the given input shardings.

    Args:
        x_shape, w_shape: ``(B, D)`` and ``(D, F)``.
        x_spec, w_spec: ``PartitionSpec`` or notation (``"X[B, D_Y]"``) for each operand.
        mesh_shape: axis name -> size.
        dtype: element type (for bytes).
        reduce_scatter: in case 3, reduce-scatter the partial sums over F instead of
            all-reducing them, so Y ends sharded ``Y[B, F_axes]``.

    Raises:
        ShardingError: inner dimensions differ, a sharding does not divide, D is sharded over
            different axes in X and W, or B and F share a mesh axis (case 4).
    """
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    if len(x_shape) != 2 or len(w_shape) != 2:
        raise ShardingError(f"X and W must be matrices; got shapes {x_shape} and {w_shape}.")
    if x_shape[1] != w_shape[0]:
        raise ShardingError(
            f"the inner dimensions differ: X is {x_shape} and W is {w_shape}, so X · W is "
            f"undefined; W needs {x_shape[1]} rows."
        )
    mesh_shape = dict(mesh_shape)
    x_spec = layout.check(x_shape, layout.as_spec(x_spec), mesh_shape)
    w_spec = layout.check(w_shape, layout.as_spec(w_spec), mesh_shape)
    bx, dx = axes_of(_entry(x_spec, 0)), axes_of(_entry(x_spec, 1))
    dw, fw = axes_of(_entry(w_spec, 0)), axes_of(_entry(w_spec, 1))
    clash = set(bx) & set(fw)
    if clash:
        axis = sorted(clash)[0]
        raise ShardingError(
            f"case 4: B of X and F of W are both sharded over mesh axis {axis!r}, so no device "
            f"holds the rows and columns it would need. All-gather one operand over {axis!r} "
            f"first, e.g. W[D, F] instead of W[D, F_{axis}]."
        )
    if dx and dw and dx != dw:
        raise ShardingError(
            f"D is sharded over {dx} in X but over {dw} in W, so the blocks do not line up. "
            "Shard D over the same axes in both, or gather one of them."
        )
    if set(dx) & set(fw) or set(dw) & set(bx):
        raise ShardingError(
            "a mesh axis shards D in one operand and a non-contracting dimension in the other; "
            "gather that operand along D first."
        )
    size = layout.dtype_size(dtype)
    (b, d), f = x_shape, w_shape[1]
    nb, nf = _size(mesh_shape, bx), _size(mesh_shape, fw)
    collectives: list[PlannedCollective] = []
    if not dx and not dw:
        case, local_d = 1, d
    elif dx and dw:
        case, local_d = 3, d // _size(mesh_shape, dx)
    else:
        case, local_d = 2, d
        axes = dx or dw
        if dx:
            collectives.append(PlannedCollective("all-gather", axes, b // nb * d * size,
                                                 _size(mesh_shape, axes), "X along D"))
        else:
            collectives.append(PlannedCollective("all-gather", axes, d * f // nf * size,
                                                 _size(mesh_shape, axes), "W along D"))
    y_b, y_f = _entry(x_spec, 0), _entry(w_spec, 1)
    if case == 3:
        n = _size(mesh_shape, dx)
        partial = b // nb * (f // nf) * size
        if reduce_scatter:
            if (f // nf) % n:
                raise ShardingError(
                    f"cannot reduce-scatter Y over {dx}: its local width {f // nf} does not "
                    f"divide into {n}; use an all-reduce or a multiple of {n} columns."
                )
            collectives.append(PlannedCollective("reduce-scatter", dx, partial // n, n,
                                                 "partial sums of Y"))
            y_f = tuple(fw) + tuple(dx)
            y_f = y_f[0] if len(y_f) == 1 else y_f
        else:
            collectives.append(PlannedCollective("all-reduce", dx, partial, n, "partial sums of Y"))
    elif reduce_scatter:
        raise ShardingError(f"reduce_scatter applies to case 3 only; this is case {case}.")
    y_spec = PartitionSpec(y_b, y_f)
    return MatmulPlan(
        x_shape, w_shape, layout.dtype_of(dtype).name, mesh_shape,
        x_spec, w_spec, y_spec, case,
        layout.shard_shape(x_shape, x_spec, mesh_shape),
        layout.shard_shape(w_shape, w_spec, mesh_shape),
        layout.shard_shape((b, f), y_spec, mesh_shape),
        2 * (b // nb) * local_d * (f // nf), tuple(collectives), reduce_scatter)


# --- run: the plan on a real mesh -----------------------------------------------------------------

def explicit(p: MatmulPlan, mesh):
    """The plan as a ``jax.shard_map`` program: the collectives are written by hand."""
    dx, dw = axes_of(_entry(p.x_spec, 1)), axes_of(_entry(p.w_spec, 0))

    def per_device(x, w):  # x: [B/|B axes|, D/|dx|], w: [D/|dw|, F/|F axes|]
        if p.case == 2 and dx:
            x = jax.lax.all_gather(x, dx, axis=1, tiled=True, to="invarying")  # x: [., D]
        if p.case == 2 and dw:
            w = jax.lax.all_gather(w, dw, axis=0, tiled=True, to="invarying")  # w: [D, .]
        y = x @ w  # y: [B/|B axes|, F/|F axes|], a partial sum over D in case 3
        if p.case == 3 and p.reduce_scatter:
            return jax.lax.psum_scatter(y, dx, scatter_dimension=1, tiled=True)
        if p.case == 3:
            return jax.lax.psum(y, dx)
        return y

    return jax.shard_map(per_device, mesh=mesh, in_specs=(p.x_spec, p.w_spec),
                         out_specs=p.y_spec)


def gspmd(p: MatmulPlan, mesh):
    """The same product left to the compiler: ``jax.jit`` with the plan's shardings."""
    return jax.jit(lambda x, w: x @ w,
                   in_shardings=(NamedSharding(mesh, p.x_spec), NamedSharding(mesh, p.w_spec)),
                   out_shardings=NamedSharding(mesh, p.y_spec))


@dataclass(frozen=True)
class Check:
    """What :func:`check` found: the result matched, and the collectives of both programs."""

    plan: MatmulPlan
    explicit: list  # tpviz.hlo.Collective of the shard_map program
    gspmd: list  # tpviz.hlo.Collective of the jit program
    max_error: float


def check(p: MatmulPlan, mesh, x, w) -> Check:
    """Run the plan both ways; compare with the single-device product and the plan's collectives.

    Raises:
        AssertionError: a result differs from ``x @ w`` or the explicit program's collectives
            (kind, bytes, group size, in order) differ from the plan's.
    """
    reference = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    programs = explicit(p, mesh), gspmd(p, mesh)
    errors = []
    for run in programs:
        y = np.asarray(run(x, w), np.float64)
        assert y.shape == reference.shape, f"result shape {y.shape} != {reference.shape}"
        errors.append(float(np.max(np.abs(y - reference)) / max(1.0, np.max(np.abs(reference)))))
    assert max(errors) < 1e-4, f"sharded result differs from x @ w (relative error {max(errors)})"
    found = hlo.collectives(programs[0], x, w)
    got = [(c.kind, c.bytes, c.group_size) for c in found]
    want = [(c.kind, c.bytes, c.group_size) for c in p.collectives]
    assert got == want, f"compiled collectives {got} differ from the plan's {want}"
    return Check(p, found, hlo.collectives(programs[1], x, w), max(errors))
