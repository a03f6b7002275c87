"""The collectives in a *compiled* program: what the compiler really emitted.

``collectives(fn, *args)`` compiles ``fn`` for the arguments (``jax.jit(fn).lower(...).compile()``)
and reads the optimized HLO text: every all-reduce, all-gather, reduce-scatter, all-to-all and
collective-permute, with the asynchronous ``-start``/``-done`` pairs counted once.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from tpviz.errors import CompileError
from tpviz.layout import dtype_size

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_HLO_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
               "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64", "u8": "uint8",
               "u32": "uint32", "pred": "bool"}

_OP_RE = re.compile(
    r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?P<shape>.+?)\s+"
    r"(?P<kind>all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
    r"(?P<start>-start)?\((?P<rest>.*)$"
)
_ARRAY_RE = re.compile(r"(\w+)\[([\d,]*)\]")
_LIST_GROUPS_RE = re.compile(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}")
_IOTA_GROUPS_RE = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH_GROUPS_RE = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_PAIRS_RE = re.compile(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}")
_PARTITIONS_RE = re.compile(r"num_partitions=(\d+)")


@dataclass(frozen=True)
class Collective:
    """One collective of a compiled program, as each participating device sees it.

    Attributes:
        kind: "all-reduce", "all-gather", "reduce-scatter", "all-to-all" or "collective-permute".
        dtype: element type of the result, e.g. "float32".
        shape: per-device shape of the result (for a tuple result: the first array's shape).
        bytes: per-device bytes of the result (all arrays of a tuple result together).
        group_size: devices in each communicating group (for a permute: devices that send).
        groups: the device groups (for a permute: the (source, target) pairs).
    """

    kind: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    group_size: int
    groups: tuple[tuple[int, ...], ...]

    @property
    def ring_bytes(self) -> float:
        """Bytes each device sends with a ring algorithm: all-gather (N-1)/N of its result,
        reduce-scatter (N-1) times its result, all-reduce 2(N-1)/N, all-to-all (N-1)/N,
        a permute its whole buffer."""
        n = self.group_size
        return {"all-gather": (n - 1) / n * self.bytes, "reduce-scatter": (n - 1) * self.bytes,
                "all-reduce": 2 * (n - 1) / n * self.bytes, "all-to-all": (n - 1) / n * self.bytes,
                "collective-permute": float(self.bytes)}[self.kind]


class Collectives(list):
    """A list of :class:`Collective` that prints as a table."""

    def kinds(self) -> Counter:
        """How many of each kind: ``Counter({"all-reduce": 1})``."""
        return Counter(c.kind for c in self)

    def rows(self) -> list[tuple]:
        return [(c.kind, c.dtype, "x".join(map(str, c.shape)) or "scalar", c.bytes, c.group_size,
                 len(c.groups)) for c in self]

    _HEAD = ("collective", "dtype", "shape per device", "bytes per device", "group size", "groups")

    def __str__(self) -> str:
        if not self:
            return "no collectives: every device computes on its own data"
        rows = [tuple(map(str, r)) for r in [self._HEAD, *self.rows()]]
        width = [max(len(r[i]) for r in rows) for i in range(len(self._HEAD))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)).rstrip()
                 for r in rows]
        return "\n".join([lines[0], "  ".join("-" * w for w in width), *lines[1:]])

    def _repr_html_(self) -> str:
        if not self:
            return f"<p><i>{self}</i></p>"
        head = "".join(f"<th>{h}</th>" for h in self._HEAD)
        body = "".join("<tr>" + "".join(f"<td>{v:,}</td>" if isinstance(v, int) else f"<td>{v}</td>"
                                        for v in r) + "</tr>" for r in self.rows())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        return str(self)


def _groups(rest: str, partitions: int) -> tuple[tuple[int, ...], ...]:
    if m := _PAIRS_RE.search(rest):
        return tuple(tuple(map(int, p)) for p in re.findall(r"\{(\d+),(\d+)\}", m.group(1)))
    if m := _IOTA_GROUPS_RE.search(rest):  # iota format: [groups,size]<=[dims]T(perm)
        out = [int(v) for v in m.group(1).split(",")]
        dims = [int(v) for v in m.group(2).split(",")]
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if m.group(3):
            ids = ids.transpose([int(v) for v in m.group(3).split(",")])
        return tuple(tuple(int(i) for i in g) for g in ids.reshape(out[0], -1))
    if m := _MESH_GROUPS_RE.search(rest):  # mesh format: mesh['a'=2,'b'=4] {'b'}
        return _mesh_groups(m.group(1), m.group(2))
    if m := _LIST_GROUPS_RE.search(rest):
        groups = tuple(tuple(int(i) for i in g.split(",") if i)
                       for g in re.findall(r"\{([\d,]*)\}", m.group(1)))
        if groups and any(groups):
            return groups
    return (tuple(range(partitions)),)  # empty groups: all devices together


def _mesh_groups(dims_text: str, axes_text: str) -> tuple[tuple[int, ...], ...]:
    """Groups of the mesh format: devices that differ only along the listed (sub-)axes."""
    names, sizes = [], []
    for name, size in re.findall(r"'([^']+)'=(\d+)", dims_text):
        names.append(name)
        sizes.append(int(size))
    picked = []  # (axis, pre, size): a sub-axis 'a':(pre)size, or the whole axis
    for name, pre, size in re.findall(r"'([^']+)'(?::\((\d+)\)(\d+))?", axes_text):
        full = sizes[names.index(name)]
        picked.append((name, int(pre) if pre else 1, int(size) if size else full))
    shape, labels = [], []
    for name, full in zip(names, sizes, strict=True):
        sub = next(((p, s) for n, p, s in picked if n == name), None)
        if sub is None:
            shape.append(full)
            labels.append(None)
        else:  # split the axis into (pre, size, post); the middle part communicates
            pre, size = sub
            shape += [pre, size, full // (pre * size)]
            labels += [None, name, None]
    ids = np.arange(int(np.prod(sizes))).reshape(shape)
    inside = [labels.index(n) for n, _, _ in picked]
    outside = [i for i in range(len(shape)) if i not in inside]
    groups = ids.transpose(outside + inside).reshape(-1, int(np.prod([shape[i] for i in inside])))
    return tuple(tuple(int(i) for i in g) for g in groups)


def parse(hlo_text: str) -> Collectives:
    """The collectives in compiled HLO text (both replica-group formats XLA prints)."""
    partitions = int(m.group(1)) if (m := _PARTITIONS_RE.search(hlo_text)) else 1
    found = Collectives()
    for line in hlo_text.splitlines():
        m = _OP_RE.match(line)
        if not m:
            continue
        arrays = _ARRAY_RE.findall(m["shape"])
        if m["start"] and m["kind"] in ("all-gather", "collective-permute") and len(arrays) > 1:
            arrays = arrays[1:2]  # (operand, result, ...): the result is the second
        dtype = _HLO_DTYPES.get(arrays[0][0], arrays[0][0])
        shapes = [tuple(int(d) for d in dims.split(",") if d) for _, dims in arrays]
        nbytes = sum(int(np.prod(s, dtype=np.int64)) * dtype_size(_HLO_DTYPES.get(t, t))
                     for (t, _), s in zip(arrays, shapes, strict=True))
        groups = _groups(m["rest"], partitions)
        size = len(groups) if m["kind"] == "collective-permute" else len(groups[0])
        found.append(Collective(m["kind"], dtype, shapes[0], nbytes, size, groups))
    return found


def compiled_text(fn, *args, **kwargs) -> str:
    """The optimized HLO text of ``fn`` compiled for these arguments.

    Raises:
        CompileError: ``fn`` does not trace or compile for these arguments.
    """
    return compile(fn, *args, **kwargs).as_text()


def compile(fn, *args, **kwargs):
    """``fn`` (jitted or plain) compiled for these arguments: call it to run the program, and
    ``parse(compiled.as_text())`` to read its collectives, without compiling twice.

    Raises:
        CompileError: ``fn`` does not trace or compile for these arguments.
    """
    import jax

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    try:
        return jitted.lower(*args, **kwargs).compile()
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        name = getattr(fn, "__name__", type(fn).__name__)
        raise CompileError(
            f"{name} does not compile for the given arguments "
            f"({', '.join(_describe(a) for a in args)}): {type(e).__name__}: {first}"
        ) from None


def _describe(a) -> str:
    shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
    return f"{dtype}{list(shape)}" if shape is not None else type(a).__name__


def collectives(fn, *args, **kwargs) -> Collectives:
    """Compile ``fn`` (jitted or plain) for the arguments and list its collectives.

    Example:
        >>> collectives(jax.shard_map(lambda x: jax.lax.psum(x, "X"), mesh=mesh,
        ...                           in_specs=P("X"), out_specs=P()), x).kinds()
        Counter({'all-reduce': 1})
    """
    return parse(compiled_text(fn, *args, **kwargs))
