"""Plan-level sharding: the Scaling Book's notation, per-device shapes, bytes and blocks.

No devices and no JAX tracing here: a layout is a shape, a ``PartitionSpec`` and a mesh shape
(a mapping axis name -> size). ``A[I_XY, J]`` means: the rows of ``A`` are split over mesh axes
``X`` and ``Y`` (``X`` major), the columns are replicated. Multi-letter axis names are written in
braces: ``A[I_{data}, J_{model}]``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from jax.sharding import PartitionSpec

from tpviz.errors import NotationError, ShardingError

MeshShape = Mapping[str, int]

_DIM_LETTERS = "IJKLMN"
_SHORT_DTYPES = {"bf16": ml_dtypes.bfloat16, "bfloat16": ml_dtypes.bfloat16, "f32": np.float32,
                 "f16": np.float16, "f64": np.float64, "s8": np.int8, "i8": np.int8,
                 "u8": np.uint8, "s32": np.int32, "i32": np.int32, "fp8": ml_dtypes.float8_e4m3fn}


def dtype_of(dtype) -> np.dtype:
    """A numpy dtype from a numpy/JAX dtype or a name such as ``"bf16"`` or ``"int8"``."""
    try:
        return np.dtype(_SHORT_DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    except TypeError:
        raise ShardingError(
            f"unknown dtype {dtype!r}; use e.g. 'float32', 'bf16' or 'int8'."
        ) from None


def dtype_size(dtype) -> int:
    """Bytes of one element."""
    return dtype_of(dtype).itemsize


def axes_of(entry) -> tuple[str, ...]:
    """The mesh axes of one ``PartitionSpec`` entry: ``None`` -> (), ``"X"`` -> ("X",)."""
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple | list) else (entry,)


# --- the notation -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Notation:
    """A parsed notation string: the array's name, its dimension letters and its spec."""

    name: str
    dims: tuple[str, ...]
    spec: PartitionSpec

    def __str__(self) -> str:
        return to_notation(self.spec, name=self.name, dims=self.dims)


_ARRAY_RE = re.compile(r"^\s*([A-Za-z][\w']*)\s*\[(.*)\]\s*$")
_DIM_RE = re.compile(r"^([A-Za-z][\w]*?)(?:_(\{[^}]*\}|[A-Za-z]+))?$")


def parse(notation: str) -> Notation:
    """Parse ``"A[I_XY, J]"`` into ``Notation("A", ("I", "J"), PartitionSpec(("X", "Y"), None))``.

    Raises:
        NotationError: the string is not of the form ``NAME[DIM_AXES, ...]``.
    """
    if not isinstance(notation, str):
        raise NotationError(f"expected a notation string such as 'A[I_X, J]', got {notation!r}.")
    m = _ARRAY_RE.match(notation)
    if not m:
        raise NotationError(
            f"cannot read {notation!r}: write an array name and its dimensions in brackets, "
            "e.g. 'A[I_X, J]' (rows split over mesh axis X, columns replicated)."
        )
    name, body = m.groups()
    dims, entries = [], []
    for part in (p.strip() for p in re.split(r",(?![^{]*\})", body)):  # commas outside {}
        d = _DIM_RE.match(part)
        if not d:
            raise NotationError(
                f"cannot read the dimension {part!r} in {notation!r}: write a letter, optionally "
                "followed by _ and the mesh axes, e.g. 'I', 'I_X', 'I_XY' or 'I_{data,model}'."
            )
        letter, sub = d.groups()
        if sub is None:
            axes: tuple[str, ...] = ()
        elif sub.startswith("{"):
            axes = tuple(a.strip() for a in sub[1:-1].split(",") if a.strip())
        else:
            axes = tuple(sub)  # single-letter axis names, concatenated: XY -> (X, Y)
        dims.append(letter)
        entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    spec = PartitionSpec(*entries)
    used = [a for e in entries for a in axes_of(e)]
    if len(set(used)) != len(used):
        twice = sorted({a for a in used if used.count(a) > 1})
        raise NotationError(
            f"{notation!r} uses mesh axis {', '.join(twice)} on more than one dimension; a mesh "
            "axis can split at most one dimension of an array."
        )
    return Notation(name, tuple(dims), spec)


def to_notation(spec: PartitionSpec, name: str = "A", dims: Sequence[str] | None = None,
                ndim: int | None = None) -> str:
    """Print a ``PartitionSpec`` in the notation: ``P("X", None)`` -> ``"A[I_X, J]"``."""
    ndim = max(len(spec), ndim or 0, len(dims or ()))
    dims = tuple(dims) if dims else tuple(_DIM_LETTERS[:ndim])
    entries = list(spec) + [None] * (ndim - len(spec))
    parts = []
    for letter, entry in zip(dims, entries, strict=True):
        axes = axes_of(entry)
        if not axes:
            parts.append(letter)
        elif all(len(a) == 1 for a in axes):
            parts.append(f"{letter}_{''.join(axes)}")
        else:
            parts.append(f"{letter}_{{{','.join(axes)}}}")
    return f"{name}[{', '.join(parts)}]"


def as_spec(spec_or_notation) -> PartitionSpec:
    """Accept a ``PartitionSpec``, a notation string, or a tuple of entries."""
    if isinstance(spec_or_notation, PartitionSpec):
        return spec_or_notation
    if isinstance(spec_or_notation, str):
        return parse(spec_or_notation).spec
    return PartitionSpec(*spec_or_notation)


# --- shapes and bytes ---------------------------------------------------------------------------

def check(shape: Sequence[int], spec, mesh_shape: MeshShape) -> PartitionSpec:
    """Validate that ``spec`` can shard an array of ``shape`` over ``mesh_shape``; return the spec.

    Raises:
        ShardingError: more spec entries than dimensions, an unknown or repeated mesh axis, or a
            dimension not divisible by the product of its mesh axes.
    """
    spec = as_spec(spec)
    shape = tuple(shape)
    if len(spec) > len(shape):
        raise ShardingError(
            f"the spec {spec} has {len(spec)} entries but the array has only {len(shape)} "
            f"dimensions {shape}; give at most one entry per dimension."
        )
    seen: list[str] = []
    for dim, entry in enumerate(spec):
        for axis in axes_of(entry):
            if axis not in mesh_shape:
                raise ShardingError(
                    f"unknown mesh axis {axis!r} in {spec}; the mesh has axes "
                    f"{', '.join(map(repr, mesh_shape))}."
                )
            if axis in seen:
                raise ShardingError(
                    f"mesh axis {axis!r} is used twice in {spec}; a mesh axis can split only one "
                    "dimension of an array."
                )
            seen.append(axis)
        parts = math.prod(mesh_shape[a] for a in axes_of(entry))
        if shape[dim] % parts:
            raise ShardingError(
                f"dimension {dim} of the array (size {shape[dim]}) does not divide into {parts} "
                f"equal parts over mesh axes {axes_of(entry)}; choose a size that is a multiple of "
                f"{parts}, or shard that dimension over fewer devices."
            )
    return spec


def shard_shape(shape: Sequence[int], spec, mesh_shape: MeshShape) -> tuple[int, ...]:
    """The shape of the block each device holds: every dimension divided by its mesh axes."""
    spec = check(shape, spec, mesh_shape)
    entries = list(spec) + [None] * (len(shape) - len(spec))
    return tuple(
        size // math.prod(mesh_shape[a] for a in axes_of(e))
        for size, e in zip(shape, entries, strict=True)
    )


def bytes_per_device(shape: Sequence[int], dtype, spec, mesh_shape: MeshShape) -> int:
    """Bytes of the block each device holds, e.g. int8[128, 2048] as A[I_XY, J] on
    {X: 2, Y: 8, Z: 2}: 128/16 * 2048 = 16,384 bytes."""
    return math.prod(shard_shape(shape, spec, mesh_shape)) * dtype_size(dtype)


def replication(spec, mesh_shape: MeshShape) -> int:
    """How many devices hold each block: the product of the mesh axes the spec does not use."""
    used = {a for e in as_spec(spec) for a in axes_of(e)}
    return math.prod(s for a, s in mesh_shape.items() if a not in used)


@dataclass(frozen=True)
class Block:
    """One block of a sharded array: its block index, the slices it covers, who holds it."""

    index: tuple[int, ...]
    slices: tuple[slice, ...]
    devices: tuple[int, ...]  # flat positions in the mesh (row-major over the mesh axes)


def blocks(shape: Sequence[int], spec, mesh_shape: MeshShape) -> list[Block]:
    """Every block of the array and the mesh positions that hold it, replication included.

    A dimension split over several axes ``(X, Y)`` is numbered ``X`` major: block ``x * |Y| + y``.
    """
    spec = check(shape, spec, mesh_shape)
    entries = list(spec) + [None] * (len(shape) - len(spec))
    local = shard_shape(shape, spec, mesh_shape)
    names = list(mesh_shape)
    holders: dict[tuple[int, ...], list[int]] = {}
    for flat, coord in enumerate(itertools.product(*(range(mesh_shape[a]) for a in names))):
        at = dict(zip(names, coord, strict=True))
        index = []
        for e in entries:
            i = 0
            for a in axes_of(e):
                i = i * mesh_shape[a] + at[a]
            index.append(i)
        holders.setdefault(tuple(index), []).append(flat)
    return [
        Block(idx, tuple(slice(i * n, (i + 1) * n) for i, n in zip(idx, local, strict=True)),
              tuple(devs))
        for idx, devs in sorted(holders.items())
    ]
