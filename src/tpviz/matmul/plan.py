"""Sharded matrix multiplication Out[B, F] = In[B, D] · W1[D, F]: the plan (no devices).

The four cases of the Scaling Book (D is the contracting dimension):

1. neither operand is sharded along D: each device multiplies its blocks, no communication;
2. one operand is sharded along D: all-gather it along D first, then multiply locally (also
   when the same mesh axis shards the other operand's B or F, as FSDP's In[B_X, D]·W1[D_X, F]);
3. both are sharded along D (over the same mesh axes): each device computes a partial sum
   ``Out[B, F]{U_axes}``, then an all-reduce adds them (or a reduce-scatter, leaving Out
   sharded);
4. the non-contracting dimensions B and F are sharded over the same mesh axis: invalid, one
   operand must be gathered along that axis first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from jax.sharding import PartitionSpec

from tpviz.core import layout
from tpviz.core.collectives import Collective
from tpviz.core.kinds import Dtype, Sizes, SpecLike
from tpviz.core.layout import MeshShape
from tpviz.core.notation import as_spec, axes_of, to_notation
from tpviz.errors import ShardingError


@dataclass(frozen=True)
class MatmulPlan:
    """How ``In[B, D] · W1[D, F]`` runs for the given shardings over a mesh (no devices involved).

    Attributes:
        case: 1, 2 or 3 (case 4 raises).
        x_spec, w_spec, y_spec: the shardings of In, W1 and of the result Out.
        x_block, w_block, y_block: per-device shapes as stored (Out: as returned).
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
    collectives: tuple[Collective, ...]
    reduce_scatter: bool

    def describe(self) -> str:
        """One paragraph in the notation: what each device does."""
        x = to_notation(self.x_spec, "In", ("B", "D"))
        w = to_notation(self.w_spec, "W1", ("D", "F"))
        y = to_notation(self.y_spec, "Out", ("B", "F"))
        steps = {1: "no communication: each device multiplies its own blocks",
                 2: "all-gather the operand sharded along D, then multiply locally",
                 3: "multiply locally into partial sums, then "
                    + ("reduce-scatter" if self.reduce_scatter else "all-reduce") + " them"}
        return f"case {self.case}: {x} · {w} → {y}: {steps[self.case]}."


def _entry(spec: PartitionSpec, i: int):
    return spec[i] if i < len(spec) else None


def _size(mesh_shape: MeshShape, axes: Sequence[str]) -> int:
    return math.prod(mesh_shape[a] for a in axes)


def _planned(kind: str, nbytes: int, mesh_shape: MeshShape, axes, what: str) -> Collective:
    return Collective(kind, nbytes, _size(mesh_shape, axes), axes=tuple(axes), what=what)


def _named_spec(name: str, shape, spec, mesh_shape):
    """``layout.validate_spec``, its error saying which argument it is about."""
    try:
        return layout.validate_spec(shape, as_spec(spec), mesh_shape)
    except ShardingError as e:
        raise ShardingError(f"{name}: {e}") from None


def plan(x_shape: Sizes(), w_shape: Sizes(), x_spec: SpecLike, w_spec: SpecLike,
         mesh_shape: MeshShape, *, dtype: Dtype = "float32", reduce_scatter: bool = False
         ) -> MatmulPlan:
    """Plan ``In[B, D] · W1[D, F]`` for the given input shardings.

    Args:
        x_shape, w_shape: ``(B, D)`` and ``(D, F)``.
        x_spec, w_spec: ``PartitionSpec`` or notation (``"In[B, D_Y]"``) for each operand.
        mesh_shape: axis name -> size.
        dtype: element type (for bytes).
        reduce_scatter: in case 3, reduce-scatter the partial sums over F instead of
            all-reducing them, so Out ends sharded ``Out[B, F_axes]``.

    Raises:
        ShardingError: inner dimensions differ, a sharding does not divide, D is sharded over
            different axes in In and W1, or B and F share a mesh axis (case 4).
    """
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    if len(x_shape) != 2 or len(w_shape) != 2:
        raise ShardingError(f"In and W1 must be matrices; got x_shape = {x_shape} and w_shape = "
                            f"{w_shape}.")
    if x_shape[1] != w_shape[0]:
        raise ShardingError(
            f"the inner dimensions differ: In is x_shape = {x_shape} and W1 is w_shape = "
            f"{w_shape}, so In · W1 is "
            f"undefined; W1 needs {x_shape[1]} rows."
        )
    mesh_shape = dict(mesh_shape)
    x_spec = _named_spec("x_spec", x_shape, x_spec, mesh_shape)
    w_spec = _named_spec("w_spec", w_shape, w_spec, mesh_shape)
    bx, dx = axes_of(_entry(x_spec, 0)), axes_of(_entry(x_spec, 1))
    dw, fw = axes_of(_entry(w_spec, 0)), axes_of(_entry(w_spec, 1))
    clash = set(bx) & set(fw)
    if clash:
        axis = sorted(clash)[0]
        raise ShardingError(
            f"case 4: B of In and F of W1 are both sharded over mesh axis {axis!r}, so no device "
            f"holds the rows and columns it would need. All-gather one operand over {axis!r} "
            f"first, e.g. W1[D, F] instead of W1[D, F_{axis}]."
        )
    if dx and dw and dx != dw:
        raise ShardingError(
            f"D is sharded over {dx} in In but over {dw} in W1, so the blocks do not line up. "
            "Shard D over the same axes in both, or gather one of them."
        )
    # A mesh axis that shards D in one operand and B or F in the other (FSDP's In[B_X, D] ·
    # W1[D_X, F]) is case 2: that operand is gathered along D, then each device multiplies.
    size = layout.dtype_size(dtype)
    (b, d), f = x_shape, w_shape[1]
    nb, nf = _size(mesh_shape, bx), _size(mesh_shape, fw)
    collectives: list[Collective] = []
    if not dx and not dw:
        case, local_d = 1, d
    elif dx and dw:
        case, local_d = 3, d // _size(mesh_shape, dx)
    else:
        case, local_d = 2, d
        axes = dx or dw
        if dx:
            collectives.append(_planned("all-gather", b // nb * d * size, mesh_shape, axes,
                                        "In along D"))
        else:
            collectives.append(_planned("all-gather", d * f // nf * size, mesh_shape, axes,
                                        "W1 along D"))
    y_b, y_f = _entry(x_spec, 0), _entry(w_spec, 1)
    if case == 3:
        n = _size(mesh_shape, dx)
        partial = b // nb * (f // nf) * size
        if reduce_scatter:
            if (f // nf) % n:
                raise ShardingError(
                    f"cannot reduce-scatter Out over {dx}: its local width {f // nf} does not "
                    f"divide into {n}; use an all-reduce or a multiple of {n} columns."
                )
            collectives.append(_planned("reduce-scatter", partial // n, mesh_shape, dx,
                                        "partial sums of Out"))
            y_f = tuple(fw) + tuple(dx)
            y_f = y_f[0] if len(y_f) == 1 else y_f
        else:
            collectives.append(_planned("all-reduce", partial, mesh_shape, dx,
                                        "partial sums of Out"))
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
