"""Checkers for chapter 0: devices, meshes and shardings."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from tpviz.core import compiled, layout
from tpviz.core.exercises import (
    Wrong,
    as_integer,
    as_number,
    call,
    checker,
    expect_array,
    expect_number,
)


@checker("Bytes per device")
def check_bytes_per_device(answer) -> str:
    """bf16[4096, 8192] sharded A[I_X, J_Y] on the mesh {X: 2, Y: 4}."""
    answer = as_number(answer)  # NumPy, JAX, Fraction: the same number
    shape, mesh = (4096, 8192), {"X": 2, "Y": 4}
    expected = layout.bytes_per_device(shape, "bf16", "A[I_X, J_Y]", mesh)
    elements = expected // 2
    if answer == elements:
        raise Wrong(f"{answer:,} is the number of elements per device, not bytes.",
                    "A bf16 element takes 2 bytes.")
    if answer == elements * 4:
        raise Wrong(f"{answer:,} counts 4 bytes per element (float32).", "bf16 takes 2 bytes.")
    if answer == 4096 * 8192 * 2:
        raise Wrong(f"{answer:,} bytes is the whole array.",
                    "Rows are split over X (2 ways) and columns over Y (4 ways).")
    expect_number(answer, expected, what="your answer",
                  hint="Divide each dimension by the size of its mesh axes, then multiply by "
                       "2 bytes per bf16 element.")
    return f"Each device holds a [2048, 2048] block: {expected:,} bytes."


@checker("Which devices hold a block")
def check_holders(answer) -> str:
    """A[I_X, J] on the mesh {X: 2, Y: 4}: which mesh positions hold rows 0 to 3 of an 8-row A."""
    mesh = {"X": 2, "Y": 4}
    expected = {d for b in layout.blocks((8, 8), "A[I_X, J]", mesh) if b.index[0] == 0
                for d in b.devices}
    if isinstance(answer, str) or not hasattr(answer, "__iter__"):
        raise Wrong(f"give a set of device numbers such as {{0, 1}}, not {answer!r}.")
    items = np.asarray(answer).ravel().tolist() if hasattr(answer, "shape") else list(answer)
    got = {as_integer(d, "each device number") for d in items}
    if got == {0, 4}:
        raise Wrong("{0, 4} would be the devices of X's first column; the mesh is row-major.",
                    "Device k sits at mesh position (k // 4, k % 4): X is the first coordinate.")
    if got < expected:
        raise Wrong(f"{sorted(got)} hold the block, but they are not all of its holders.",
                    "The columns are not split, so the Y axis replicates each block: every device "
                    "with the same X coordinate holds the same rows.")
    if got != expected:
        raise Wrong(f"{sorted(got)} is not the set of devices that hold rows 0 to 3.",
                    "Rows are split over X only; X is the first mesh coordinate.")
    return "Rows 0–3 live on X = 0, replicated over the 4 devices of Y."


@checker("Rows over the whole mesh")
def check_rows_over_mesh(x_sharded, x) -> str:
    """``x`` placed so that its rows are split over both axes of a (2, 4) mesh, X major."""
    if not isinstance(x_sharded, jax.Array) or not isinstance(x_sharded.sharding, NamedSharding):
        raise Wrong("x_sharded should be a jax.Array placed with a NamedSharding.",
                    "Use jax.device_put(x, NamedSharding(mesh, PartitionSpec(...))).")
    expect_array(x_sharded, np.asarray(x), what="x_sharded",
                 hint="device_put should only move x, not change it.")
    mesh = x_sharded.sharding.mesh
    if mesh.size != 8 or len(x_sharded.sharding.device_set) != 8:
        raise Wrong(f"x_sharded sits on {len(x_sharded.sharding.device_set)} devices of a mesh "
                    f"{dict(mesh.shape)}; the exercise asks for all 8 devices as a (2, 4) mesh.",
                    "Make the mesh with tpviz.make_mesh((2, 4), ('X', 'Y')).")
    want = NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))
    local = x_sharded.addressable_shards[0].data.shape
    wanted = layout.shard_shape(x.shape, want.spec, dict(mesh.shape))
    if local != wanted:
        raise Wrong(f"each device holds a block of shape {tuple(local)}; it should hold "
                    f"{wanted}: {x.shape[0] // mesh.size} whole rows.",
                    "Put both axes on the first dimension: PartitionSpec(('X', 'Y'), None).")
    if not x_sharded.sharding.is_equivalent_to(want, x.ndim):
        raise Wrong("the blocks have the right shape but sit on the wrong devices.",
                    "The order inside the tuple matters: ('X', 'Y') makes X the major axis.")
    n = wanted[0]
    return f"Spec {x_sharded.sharding.spec}: device k holds rows {n}k to {n}k + {n - 1}."


@checker("A global sum with one all-reduce")
def check_total(total, x) -> str:
    """``total(x)`` under ``jax.shard_map``: the sum of all elements, one all-reduce of a scalar."""
    program = call(compiled.compile_for, total, x, what="total(x)")  # traces it once
    result = call(program, x, what="total(x)")
    if np.shape(result) != ():
        raise Wrong(f"total(x) has shape {np.shape(result)}; a sum is a scalar.",
                    "Sum the whole block (block.sum()) and psum that; use out_specs=P().")
    expect_array(result, np.float32(np.asarray(x).sum()), what="total(x)", rtol=1e-4,
                 hint="Each device sums its own block; jax.lax.psum(…, 'X') adds the blocks' sums.")
    found = compiled.collectives(program)
    if found.kinds() != {"all-reduce": 1}:
        raise Wrong(f"the compiled program holds {dict(found.kinds())}; expected one all-reduce.",
                    "Use exactly one jax.lax.psum over 'X'.")
    (op,) = found
    if op.bytes != np.dtype(x.dtype).itemsize:
        raise Wrong(f"your all-reduce moves a {op.dtype}{list(op.shape)} array ({op.bytes} bytes "
                    "per device); a single number would do.",
                    "Sum the block locally first, then psum that one number.")
    return f"One all-reduce of {op.bytes} bytes over {op.group_size} devices."
