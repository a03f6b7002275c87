"""Each op's parallel strategies on a mesh, their costs, and the cost of resharding an edge.

A strategy puts each mesh axis on one dimension of the op, or on none (replicated along it):

- matmul ``Out[B, F] = In[B, D] · W[D, F]`` (written here with generic letters; a strategy's
  notation names the dimensions after the op's real shape, e.g. ``In[B, F] · W_2[F, H]`` for
  the MLP's second matmul): each axis splits B, D, F or nothing (4^k strategies on a k-axis
  mesh). A training step runs three matmuls, each contracting one of the three dimensions:
  ``Out = In W`` contracts D, ``dIn = dOut Wᵀ`` contracts F, ``dW = Inᵀ dOut`` contracts B.
  Sharding the contracted dimension leaves partial sums, so each costs an all-reduce of its
  result (case 3 of the sharded-matmul chapter): D sharded → all-reduce Out (Megatron's
  row-parallel ``g``), F sharded → all-reduce dIn (column-parallel's ``f``), B sharded →
  all-reduce dW (data parallelism). :func:`tpviz.matmul.plan` plans each of the three;
- element-wise ops follow their input: any layout of their ``[B, H]`` or ``[B, F]``, no
  communication;
- a sum over the columns: columns sharded → each device holds a partial sum, all-reduce it.

An edge whose producer leaves a layout its consumer does not want costs a resharding: per mesh
axis, an all-gather (sharded → replicated), an all-to-all (moved to the other dimension) or a
free local slice (replicated → sharded); in training the gradient is resharded back.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

from jax.sharding import PartitionSpec as P

from tpviz import matmul
from tpviz.autoshard.graph import Op
from tpviz.core import layout, validate
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import Dtype, MeshShape, Sizes, SpecLike
from tpviz.core.notation import as_spec, axes_of, to_notation
from tpviz.errors import ShardingError


@dataclass(frozen=True)
class Strategy:
    """One way to run one op.

    Attributes:
        notation: the sharding in the book's notation, e.g. ``"In[B, H] · W_1[H, F_X]"``.
        in_specs: the layout it needs for each input.
        out_spec: the layout of its output.
        weight_spec: a matmul's weight layout (None otherwise).
        flops: FLOPs per device of a training step (forward and backward).
        forward, backward: collectives of the forward and of the backward pass.
        memory: bytes per device it keeps: weight and gradient, and its output activation.
    """

    notation: str
    in_specs: tuple[P, ...]
    out_spec: P
    weight_spec: P | None
    flops: int
    forward: tuple[Collective, ...]
    backward: tuple[Collective, ...]
    memory: int


def _spec(dims: list[list[str]]) -> P:
    return P(*(None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims))


def layouts(shape: Sizes(), mesh_shape: MeshShape) -> list[P]:
    """Every layout of a matrix: each mesh axis on rows, on columns or on neither (3^k of
    them), keeping those whose sizes divide."""
    if len(shape) != 2:
        raise ShardingError(f"shape = {tuple(shape)}: layouts lists the layouts of a matrix; "
                            f"give its (rows, columns).")
    names, found = list(mesh_shape), []
    for where in itertools.product((None, 0, 1), repeat=len(names)):
        dims: list[list[str]] = [[], []]
        for axis, w in zip(names, where, strict=True):
            if w is not None:
                dims[w].append(axis)
        spec = _spec(dims)
        try:
            layout.validate_spec(shape, spec, mesh_shape)
        except ShardingError:
            continue
        found.append(spec)
    return found


def _block_bytes(shape, spec, mesh_shape, size) -> int:
    return math.prod(layout.shard_shape(shape, spec, mesh_shape)) * size


def _matmul(op: Op, mesh_shape, size: int, dtype: str) -> list[Strategy]:
    (b, d), f = op.in_shapes[0], op.shape[1]
    names, found = list(mesh_shape), []
    for where in itertools.product("BDF-", repeat=len(names)):
        ax = {k: tuple(a for a, w in zip(names, where, strict=True) if w == k) for k in "BDF"}
        e = {k: (None if not v else v[0] if len(v) == 1 else v) for k, v in ax.items()}
        try:
            fwd = matmul.plan((b, d), (d, f), P(e["B"], e["D"]), P(e["D"], e["F"]), mesh_shape,
                              dtype=dtype)  # Out = In W, contracts D
            dx = matmul.plan((b, f), (f, d), P(e["B"], e["F"]), P(e["F"], e["D"]), mesh_shape,
                             dtype=dtype)  # dIn = dOut Wᵀ, contracts F
            dw = matmul.plan((d, b), (b, f), P(e["D"], e["B"]), P(e["B"], e["F"]), mesh_shape,
                             dtype=dtype)  # dW = Xᵀ dY, contracts B
        except ShardingError:
            continue
        x_spec, w_spec, y_spec = P(e["B"], e["D"]), P(e["D"], e["F"]), P(e["B"], e["F"])
        named = [_named(c, w) for c, w in ((fwd, "Out"), (dx, "dIn"), (dw, "dW"))]
        din, dout = op.dims
        notation = (f"{to_notation(x_spec, 'In', ('B', din))} · "
                    f"{to_notation(w_spec, op.weight_name, (din, dout))}")
        memory = 2 * _block_bytes((d, f), w_spec, mesh_shape, size) + _block_bytes(
            op.shape, y_spec, mesh_shape, size)
        found.append(Strategy(notation, (x_spec,), y_spec, w_spec,
                              fwd.flops + dx.flops + dw.flops, named[0], named[1] + named[2],
                              memory))
    return found


GRADIENT_SYNC = "partial sums of dW"  # what a weight gradient's all-reduce is called


def _named(p, what: str) -> tuple[Collective, ...]:
    return tuple(Collective(c.kind, c.bytes, c.group_size, p.dtype, p.y_block, c.axes,
                            what=f"partial sums of {what}") for c in p.collectives
                 if c.moves_data)


def _elementwise(op: Op, mesh_shape, size: int, dtype: str) -> list[Strategy]:
    found = []
    for spec in layouts(op.shape, mesh_shape):
        cols = axes_of(spec[1]) if len(spec) > 1 else ()
        if op.fn == "heads" and op.heads % math.prod(mesh_shape[a] for a in cols):
            continue  # whole heads per device
        rows = spec[0] if len(spec) else None
        in_spec = spec if op.fn != "heads" else P(rows, spec[1] if len(spec) > 1 else None)
        try:
            layout.validate_spec(op.in_shapes[0], in_spec, mesh_shape)
        except ShardingError:
            continue
        local = math.prod(layout.shard_shape(op.shape, spec, mesh_shape))
        found.append(Strategy(to_notation(spec, "A", ("B", op.dims[1])),
                              (in_spec,) * len(op.inputs),
                              spec, None, 3 * local, (), (), local * size))
    return found


def _reduction(op: Op, mesh_shape, size: int, dtype: str) -> list[Strategy]:
    found = []
    for spec in layouts(op.in_shapes[0], mesh_shape):
        rows, cols = ([*list(spec), None, None])[:2]
        out = P(rows, None)
        block = layout.shard_shape(op.shape, out, mesh_shape)
        n = math.prod(mesh_shape[a] for a in axes_of(cols))
        fwd = (Collective("all-reduce", math.prod(block) * size, n, dtype, block, axes_of(cols),
                          what="partial sums over the columns"),) if n > 1 else ()
        local = math.prod(layout.shard_shape(op.in_shapes[0], spec, mesh_shape))
        found.append(Strategy(f"{to_notation(spec, 'A', ('B', op.dims[0]))} → sum over "
                              f"{op.dims[0]}",
                              (spec,), out, None, 2 * local, fwd, (), math.prod(block) * size))
    return found


def _input(op: Op, mesh_shape, size: int, dtype: str) -> list[Strategy]:
    """A graph input read by several ops: any layout, delivered by the data loader for free."""
    return [Strategy(to_notation(spec, "A", ("B", op.dims[1])), (), spec, None, 0, (), (),
                     _block_bytes(op.shape, spec, mesh_shape, size))
            for spec in layouts(op.shape, mesh_shape)]


def strategies(op: Op, mesh_shape: MeshShape, dtype: Dtype = "float32") -> list[Strategy]:
    """The strategies of ``op`` on ``mesh_shape`` (axis name → size) whose sizes divide.

    Raises:
        ShardingError: no strategy divides the op's sizes.
    """
    found = _cached(replace(op, name="", inputs=("",) * len(op.inputs)),
                    tuple(dict(mesh_shape).items()), str(layout.dtype_of(dtype)))
    if not found:
        raise ShardingError(f"op {op.name!r} ({op.fn}, shape {op.shape}) has no strategy on mesh "
                            f"{dict(mesh_shape)}: its sizes do not divide.")
    return list(found)


@functools.lru_cache(maxsize=4096)
def _cached(op: Op, mesh: tuple, dtype: str) -> tuple[Strategy, ...]:
    """The strategies depend on the op's kind and shapes only (ops of every layer share them)."""
    make = {"matmul": _matmul, "elementwise": _elementwise, "reduction": _reduction,
            "input": _input}[op.kind]
    return tuple(make(op, dict(mesh), layout.dtype_size(dtype), dtype))


def reshard(shape: Sizes(), src: SpecLike, dst: SpecLike, mesh_shape: MeshShape,
            dtype: Dtype = "float32") -> Collectives:
    """The collectives that turn an array laid out as ``src`` into ``dst``, one mesh axis at a
    time: first the free local slices (replicated → sharded), then all-to-alls (moved to the
    other dimension), then all-gathers (sharded → replicated), each on the current block.
    Layouts are compared per dimension as sets of axes: a change of their order (which GSPMD
    carries out with a collective-permute) is free here.
    """
    mesh_shape = validate.mesh_shape("mesh_shape", mesh_shape)
    shape = tuple(validate.integer(f"shape[{i}]", n) for i, n in enumerate(shape))
    src, dst = (_named_spec(name, shape, s, mesh_shape)
                for name, s in (("src", src), ("dst", dst)))
    return Collectives(_reshard(shape, P(*src), P(*dst), tuple(mesh_shape.items()),
                                str(layout.dtype_of(dtype))))


def _named_spec(name: str, shape, spec, mesh_shape):
    """``layout.validate_spec``, its error saying which argument it is about."""
    try:
        return layout.validate_spec(shape, as_spec(spec), mesh_shape)
    except ShardingError as e:
        raise ShardingError(f"{name}: {e}") from None


@functools.lru_cache(maxsize=65536)
def _reshard(shape, src, dst, mesh: tuple, dtype: str) -> tuple[Collective, ...]:
    mesh_shape, size = dict(mesh), layout.dtype_size(dtype)
    cur = [list(axes_of(e)) for e in ([*list(src), None, None])[:2]]
    want = [set(axes_of(e)) for e in ([*list(dst), None, None])[:2]]
    where = {a: i for i, d in enumerate(want) for a in d}
    out = Collectives()
    for step in ("slice", "all-to-all", "all-gather"):
        for axis in mesh_shape:
            now = next((i for i, d in enumerate(cur) if axis in d), None)
            goal = where.get(axis)
            if now == goal:
                continue
            kind = "slice" if now is None else "all-gather" if goal is None else "all-to-all"
            if kind != step:
                continue
            if now is not None:
                cur[now].remove(axis)
            if goal is not None:
                cur[goal].append(axis)
            if kind != "slice":
                block = layout.shard_shape(shape, _spec(cur), mesh_shape)
                if kind == "all-to-all":  # the buffer each device sends from: the block before
                    block = layout.shard_shape(shape, _spec(_undo(cur, axis, now, goal)),
                                               mesh_shape)
                out.append(Collective(kind, math.prod(block) * size, mesh_shape[axis], dtype,
                                      tuple(block), (axis,), what=f"reshard along {axis}"))
    return tuple(out)


def _undo(cur, axis, now, goal):
    dims = [list(d) for d in cur]
    dims[goal].remove(axis)
    dims[now].append(axis)
    return dims
