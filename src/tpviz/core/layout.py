"""Plan-level layouts: per-device shapes, bytes and blocks of a sharded array.

No devices and no JAX tracing here: a layout is a shape, a ``PartitionSpec`` (or the notation
of :mod:`tpviz.core.notation`) and a mesh shape (a mapping axis name -> size).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from jax.sharding import PartitionSpec

from tpviz.core import kinds
from tpviz.core import validate as _validate  # the module of argument checks
from tpviz.core.kinds import Any_, Dtype, Sizes, SpecLike
from tpviz.core.notation import as_spec, axes_of, parse
from tpviz.errors import ArgumentTypeError, ShardingError

MeshShape = kinds.MeshShape  # {axis: size} or a jax Mesh

_SHORT_DTYPES = {"bf16": ml_dtypes.bfloat16, "bfloat16": ml_dtypes.bfloat16, "f32": np.float32,
                 "f16": np.float16, "f64": np.float64, "s8": np.int8, "i8": np.int8,
                 "u8": np.uint8, "s32": np.int32, "i32": np.int32, "fp8": ml_dtypes.float8_e4m3fn}


_SUB_BYTE = re.compile(r"^u?int[124]$|^float[46]_")  # int4, uint2, float4_e2m1fn, ...


def dtype_of(dtype: Any_) -> np.dtype:
    """A numpy dtype from a numpy/JAX dtype or a name such as ``"bf16"`` or ``"int8"``."""
    if dtype is None:
        raise ShardingError("dtype=None: give a dtype such as 'float32', 'bf16' or 'int8'.")
    try:
        found = np.dtype(_SHORT_DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    except TypeError:
        raise ShardingError(
            f"unknown dtype {dtype!r}; use e.g. 'float32', 'bf16' or 'int8'."
        ) from None
    if (isinstance(dtype, str) and dtype not in _SHORT_DTYPES and found.name != dtype
            and re.fullmatch(r"(u?int|float|[iufc])\d+", dtype)):
        raise ShardingError(f"dtype {dtype!r} is NumPy's old code for {found.name}; write "
                            f"{found.name!r} if you mean it.")
    if isinstance(dtype, str) and dtype not in _SHORT_DTYPES and found.name != dtype:
        raise ShardingError(f"dtype {dtype!r} is an alias NumPy reads as {found.name} (torch reads "
                            f"'float' as float32): write {found.name!r}.")
    if _SUB_BYTE.match(found.name):
        raise ShardingError(f"dtype {found.name!r} packs several values into a byte, and tpviz "
                            "counts whole bytes per element; use 'int8' or 'fp8' (and halve "
                            "the bytes yourself for 4 bits).")
    return found


def dtype_size(dtype: Any_) -> int:
    """Bytes of one element."""
    return dtype_of(dtype).itemsize


def validate_spec(shape: Sizes(), spec: SpecLike, mesh_shape: MeshShape) -> PartitionSpec:
    """Validate that ``spec`` can shard an array of ``shape`` over ``mesh_shape``; return the spec.

    Raises:
        ShardingError: more spec entries than dimensions, an unknown or repeated mesh axis, or a
            dimension not divisible by the product of its mesh axes.
    """
    written = spec
    spec = as_spec(spec)
    shape = array_shape("shape", shape)
    mesh_shape = _validate.mesh_shape("mesh_shape", mesh_shape)
    if isinstance(written, str) and len(parse(written).dims) != len(shape):
        raise ShardingError(f"spec {written!r} names {len(parse(written).dims)} dimension(s), "
                            f"but shape {shape} has {len(shape)}: write one letter per "
                            f"dimension (e.g. 'A[I_X, J]' for a matrix).")
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
                    f"spec {spec} names an unknown mesh axis {axis!r}: mesh_shape has axes "
                    f"{', '.join(map(repr, mesh_shape)) or 'none'}; use one of those."
                )
            if axis in seen:
                raise ShardingError(
                    f"spec: mesh axis {axis!r} is used twice in {spec}; a mesh axis can split "
                    "only one dimension of an array."
                )
            seen.append(axis)
        parts = math.prod(mesh_shape[a] for a in axes_of(entry))
        if shape[dim] % parts:
            raise ShardingError(
                f"dimension {dim} of shape {shape} (size {shape[dim]}) does not divide into "
                f"{parts} equal parts over mesh axes {axes_of(entry)}; choose a size that is a "
                f"multiple of {parts}, or shard that dimension over fewer devices."
            )
    return spec


def array_shape(name: str, shape: Any_) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints, with a clear error for anything else."""
    if isinstance(shape, str) or not hasattr(shape, "__iter__"):
        raise ArgumentTypeError(f"{name} must be a tuple of sizes such as (8, 16), got "
                                f"{type(shape).__name__} {shape!r}.")
    sizes = tuple(_validate.integer(f"{name}[{i}]", s, minimum=0) for i, s in enumerate(shape))
    if math.prod(sizes) > 2**53:
        raise ShardingError(f"{name} = {sizes} has {math.prod(sizes):,} elements, more than the "
                            f"bound of 2**53 (beyond it counts of elements and bytes are not exact "
                            f"in floating point; no machine holds such an array).")
    return sizes


def shard_shape(shape: Sizes(), spec: SpecLike, mesh_shape: MeshShape) -> tuple[int, ...]:
    """The shape of the block each device holds: every dimension divided by its mesh axes.

    ``mesh_shape`` maps axis names to sizes (a ``jax.sharding.Mesh`` works too)."""
    mesh_shape = _validate.mesh_shape("mesh_shape", mesh_shape)
    _validate.bounded("devices in mesh_shape (one holder list entry each)",
                      math.prod(mesh_shape.values()), MAX_BLOCK_DEVICES,
                      "Draw or list a smaller mesh: the layout of a 4 × 8 mesh shows the same "
                      "pattern as a 4096 × 4096 one.")
    spec = validate_spec(shape, spec, mesh_shape)
    shape = tuple(int(s) for s in shape)
    entries = list(spec) + [None] * (len(shape) - len(spec))
    return tuple(
        size // math.prod(mesh_shape[a] for a in axes_of(e))
        for size, e in zip(shape, entries, strict=True)
    )


def bytes_per_device(shape: Sizes(), dtype: Dtype, spec: SpecLike, mesh_shape: MeshShape) -> int:
    """Bytes of the block each device holds, e.g. int8[128, 2048] as A[I_XY, J] on
    {X: 2, Y: 8, Z: 2}: 128/16 * 2048 = 16,384 bytes."""
    return math.prod(shard_shape(shape, spec, mesh_shape)) * dtype_size(dtype)


def replication(spec: SpecLike, mesh_shape: MeshShape) -> int:
    """How many devices hold each block: the product of the mesh axes the spec does not use."""
    mesh_shape = _validate.mesh_shape("mesh_shape", mesh_shape)
    named = [a for e in as_spec(spec) for a in axes_of(e)]
    used = set(named)
    if len(used) < len(named):
        twice = next(a for a in named if named.count(a) > 1)
        raise ShardingError(f"spec: mesh axis {twice!r} is used twice in {spec!r}; a mesh axis "
                            "can split only one dimension of an array.")
    if used - set(mesh_shape):
        raise ShardingError(f"spec {spec!r} uses mesh axis {sorted(used - set(mesh_shape))[0]!r}, "
                            f"which mesh_shape {mesh_shape} does not have.")
    return math.prod(s for a, s in mesh_shape.items() if a not in used)


@dataclass(frozen=True)
class Block:
    """One block of a sharded array: its block index, the slices it covers, who holds it."""

    index: tuple[int, ...]
    slices: tuple[slice, ...]
    devices: tuple[int, ...]  # flat positions in the mesh (row-major over the mesh axes)


MAX_BLOCK_DEVICES = 16_384  # blocks() lists every device: 16,384 take about a second


def blocks(shape: Sizes(), spec: SpecLike, mesh_shape: MeshShape) -> list[Block]:
    """Every block of the array and the mesh positions that hold it, replication included.

    A dimension split over several axes ``(X, Y)`` is numbered ``X`` major: block ``x * |Y| + y``.
    """
    mesh_shape = _validate.mesh_shape("mesh_shape", mesh_shape)
    _validate.bounded("devices in mesh_shape (one holder list entry each)",
                      math.prod(mesh_shape.values()), MAX_BLOCK_DEVICES,
                      "Draw or list a smaller mesh: the layout of a 4 × 8 mesh shows the same "
                      "pattern as a 4096 × 4096 one.")
    spec = validate_spec(shape, spec, mesh_shape)
    shape = tuple(int(s) for s in shape)
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
