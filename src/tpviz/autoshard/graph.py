"""A tiny operator graph: matmuls, element-wise ops and reductions, with shapes (no devices).

Every activation is a matrix ``[rows, columns]`` (rows are tokens, ``B`` for short). An op
reads the outputs of earlier ops or of the graph's inputs:

- ``matmul``: ``Out[B, F] = In[B, H] · W_1[H, F]``, with its own weight;
- ``elementwise``: ``gelu`` (one input) or ``add`` (two inputs of the same shape); ``heads`` is a
  head-local stand-in for the attention core: ``[B, 3H] → [B, H]``, each output column reads
  only the columns of its own head (so it shards like an element-wise op along rows and heads);
- ``reduction``: ``sum`` over the columns, ``[B, H] → [B, 1]``.

Each op names the column dimensions of its input and output after the model's sizes (``dims``:
``H`` the model width, ``F`` the FFN width, ``Q = 3H`` the columns of queries, keys and values
together), so that a strategy reads ``In[B, F_X] · W_2[F_X, H]`` for the MLP's second matmul and
``A[B, F_X]`` for the gelu between them. Ops are listed in topological order. The graph's
inputs (``x``) are free: the data loader can deliver them in whatever layout the first op
wants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpviz.core import layout
from tpviz.core import validate as check
from tpviz.core.kinds import Dtype, OneOf, Size
from tpviz.errors import ArgumentError, ShardingError

KINDS = {"matmul": ("matmul",), "elementwise": ("gelu", "add", "heads"), "reduction": ("sum",)}
OPS = "each layer adds ops to the graph the solver works through"


@dataclass(frozen=True)
class Op:
    """One operator: ``name = fn(*inputs)``.

    Attributes:
        name: unique within the graph.
        kind: "matmul", "elementwise" or "reduction".
        fn: "matmul", "gelu", "add", "heads" or "sum".
        inputs: names of the ops (or graph inputs) it reads.
        in_shapes: their shapes.
        shape: shape of its output.
        weight: shape ``(D, F)`` of a matmul's weight, else None.
        heads: attention heads of a "heads" op (columns of one head stay together), else 0.
        dims: names of the column dimension of its (first) input and of its output.
        weight_name: a matmul's weight in the notation, e.g. ``W_1``.
    """

    name: str
    kind: OneOf(KINDS)
    fn: OneOf(("matmul", "gelu", "add", "heads", "sum"))
    inputs: tuple[str, ...]
    in_shapes: tuple[tuple[int, int], ...]
    shape: tuple[int, int]
    weight: tuple[int, int] | None = None
    heads: int = 0
    dims: tuple[str, str] = ("H", "H")
    weight_name: str = "W"

    @property
    def flops(self) -> int:
        """Forward FLOPs on one device holding everything: ``2 B D F`` for a matmul, one per
        output element otherwise (a sum: one per input element)."""
        if self.kind == "matmul":
            return 2 * self.shape[0] * self.weight[0] * self.weight[1]
        rows, cols = self.in_shapes[0] if self.fn == "sum" else self.shape
        return rows * cols


@dataclass(frozen=True)
class Graph:
    """Ops in topological order, the graph's input shapes and the element type."""

    ops: tuple[Op, ...]
    inputs: dict[str, tuple[int, int]]
    dtype: str = "float32"
    dims: dict[str, str] = field(default_factory=dict)  # input name -> its column dimension

    def __len__(self) -> int:
        return len(self.ops)

    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise ArgumentError(f"no op named {name!r}; the graph has {[o.name for o in self.ops]}.")

    @property
    def edges(self) -> list[tuple[int, int, int]]:
        """``(producer, consumer, input position)`` for every op-to-op edge (by op index)."""
        index = {o.name: i for i, o in enumerate(self.ops)}
        return [(index[src], j, k) for j, o in enumerate(self.ops)
                for k, src in enumerate(o.inputs) if src in index]

    @property
    def nodes(self) -> tuple[Op, ...]:
        """The ops the solver places: every op, preceded by an ``input`` node for each graph input
        read by more than one op (it arrives in one layout, which its readers may have to
        reshard); an input read once arrives in whatever layout its reader wants."""
        readers = [i for op in self.ops for i in op.inputs if i in self.inputs]
        shared = tuple(Op(name, "input", "input", (), (), tuple(shape),
                          dims=(self.dims.get(name, "H"),) * 2)
                       for name, shape in self.inputs.items() if readers.count(name) > 1)
        return shared + self.ops

    @property
    def node_edges(self) -> list[tuple[int, int, int]]:
        """:attr:`edges` over :attr:`nodes`."""
        nodes = self.nodes
        index = {o.name: i for i, o in enumerate(nodes)}
        return [(index[src], j, k) for j, o in enumerate(nodes)
                for k, src in enumerate(o.inputs) if src in index]

    @property
    def output(self) -> str:
        """The last op's name: what the graph computes."""
        return self.ops[-1].name

    @property
    def outputs(self) -> tuple[str, ...]:
        """Every op no other op reads: all of them are results (none is dead code)."""
        read = {i for op in self.ops for i in op.inputs}
        return tuple(op.name for op in self.ops if op.name not in read)


def _positive(**sizes) -> None:
    for name, value in sizes.items():
        check.integer(name, value)


class Builder:
    """Adds ops one at a time and checks their shapes."""

    def __init__(self, dtype: Dtype = "float32", **inputs: tuple[int, int]):
        layout.dtype_of(dtype)
        self.dtype, self.inputs, self.ops = str(layout.dtype_of(dtype)), dict(inputs), []
        self.shapes = {k: tuple(v) for k, v in inputs.items()}
        self.dims = {k: "H" for k in inputs}  # the inputs' columns: the model width H
        self.widths = {v[1]: "H" for v in self.shapes.values() if len(v) == 2}

    def _dim(self, x: str) -> str:
        return self.dims.get(x, "H")

    def _add(self, name, kind, fn, inputs, shape, weight=None, heads=0, dims=None,
             weight_name="W") -> str:
        if name in self.shapes:
            raise ArgumentError(f"the name {name!r} is used twice; give every op its own name.")
        for i in inputs:
            if i not in self.shapes:
                which = "x = " if len(inputs) == 1 else ""
                raise ArgumentError(f"op {name!r} reads {which}{i!r}, which is not defined "
                                    f"before it.")
        if dims is None:
            dims = (self._dim(inputs[0]),) * 2 if inputs else ("H", "H")
        op = Op(name, kind, fn, tuple(inputs), tuple(self.shapes[i] for i in inputs),
                tuple(shape), weight, heads, tuple(dims), weight_name)
        self.ops.append(op)
        self.shapes[name] = op.shape
        self.dims[name] = op.dims[1]
        return name

    def matmul(self, name: str, x: str, features: int, dim: str | None = None,
               weight: str | None = None) -> str:
        """``name = x · W`` with a new weight ``W[D, features]``. ``dim`` names the new
        column dimension (default: ``H`` for the model width, ``F`` for another width, ``F2``,
        ``F3`` … for further ones); ``weight`` names the weight (default ``W_name``)."""
        features = check.integer("features", features)
        rows, d = self.shapes.get(x, (0, 0))
        if dim is None:
            dim = self.widths.get(features) or next(
                n for n in ("F", *(f"F{i}" for i in range(2, 99))) if n not in
                self.widths.values())
        self.widths.setdefault(features, dim)
        return self._add(name, "matmul", "matmul", [x], (rows, features), (d, features),
                         dims=(self._dim(x), dim),
                         weight_name=weight or f"W_{name}")

    def gelu(self, name: str, x: str) -> str:
        return self._add(name, "elementwise", "gelu", [x], self.shapes.get(x, (0, 0)))

    def add(self, name: str, a: str, b: str) -> str:
        for arg, i in (("a", a), ("b", b)):
            if i not in self.shapes:
                raise ArgumentError(f"op {name!r} reads {arg} = {i!r}, which is not defined "
                                    f"before it.")
        if self.shapes.get(a) != self.shapes.get(b):
            raise ShardingError(f"add {name!r}: {a} is {self.shapes.get(a)} but {b} is "
                                f"{self.shapes.get(b)}; an element-wise add needs equal shapes.")
        return self._add(name, "elementwise", "add", [a, b], self.shapes[a])

    def heads(self, name: str, qkv: str, heads: int) -> str:
        heads = check.integer("heads", heads)
        rows, cols = self.shapes.get(qkv, (0, 0))
        if cols % (3 * heads):
            raise ShardingError(f"heads {name!r}: {cols} columns do not hold q, k and v for "
                                f"{heads} heads; use 3 × hidden columns, hidden divisible by "
                                "heads.")
        return self._add(name, "elementwise", "heads", [qkv], (rows, cols // 3), heads=heads,
                         dims=(self._dim(qkv), "H"))

    def sum(self, name: str, x: str) -> str:
        return self._add(name, "reduction", "sum", [x], (self.shapes.get(x, (0, 0))[0], 1),
                         dims=(self._dim(x), "1"))

    def graph(self) -> Graph:
        if not self.ops:
            raise ArgumentError("the graph has no ops; add at least one.")
        return Graph(tuple(self.ops), self.inputs, self.dtype,
                     {k: self.dims[k] for k in self.inputs})


def mlp(batch: int, hidden: int, ffn: int, layers: Size(64, OPS) = 1, dtype: Dtype = "float32"
        ) -> Graph:
    """``layers`` MLP blocks, each ``matmul [B, H]·[H, F] → gelu → matmul [B, F]·[F, H]``.

    Raises:
        ArgumentError: a size or ``layers`` that is not a positive integer.
    """
    _positive(batch=batch, hidden=hidden, ffn=ffn, layers=layers)
    g = Builder(dtype, x=(batch, hidden))
    x = "x"
    for i in range(1, layers + 1):
        h = g.matmul(f"w1.{i}", x, ffn, "F" if ffn != hidden else "H", "W_1")
        a = g.gelu(f"gelu.{i}", h)
        x = g.matmul(f"w2.{i}", a, hidden, "H", "W_2")
    return g.graph()


def transformer(tokens: int, hidden: int, ffn: int, heads: int, layers: Size(64, OPS) = 1,
                dtype: Dtype = "float32") -> Graph:
    """``layers`` transformer blocks (8 ops each): ``qkv`` matmul ``[B, H]·[H, 3H]``, the
    head-local attention core, ``out`` matmul ``[H, H]``, residual add, MLP (``w1``, gelu,
    ``w2``), residual add. Layer norms are left out.

    Raises:
        ArgumentError: a size that is not a positive integer.
        ShardingError: ``hidden`` not divisible by ``heads``.
    """
    _positive(tokens=tokens, hidden=hidden, ffn=ffn, heads=heads, layers=layers)
    if hidden % heads:
        raise ShardingError(f"hidden = {hidden} is not divisible by heads = {heads}.")
    g = Builder(dtype, x=(tokens, hidden))
    x = "x"
    for i in range(1, layers + 1):
        qkv = g.matmul(f"qkv.{i}", x, 3 * hidden, "Q", "W_QKV")  # Q = 3H columns
        att = g.heads(f"attn.{i}", qkv, heads)
        x = g.add(f"res1.{i}", x, g.matmul(f"out.{i}", att, hidden, "H", "W_O"))
        h = g.gelu(f"gelu.{i}", g.matmul(f"w1.{i}", x, ffn, "F" if ffn != hidden else "H",
                                         "W_1"))
        x = g.add(f"res2.{i}", x, g.matmul(f"w2.{i}", h, hidden, "H", "W_2"))
    return g.graph()
