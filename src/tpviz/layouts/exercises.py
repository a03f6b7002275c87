"""Checkers for chapter 0: devices, meshes and shardings."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from tpviz import compat
from tpviz.core import build, compiled, layout
from tpviz.core.exercises import (
    NotAttempted,
    Wrong,
    as_integer,
    as_number,
    call,
    checker,
    expect_array,
    expect_number,
    is_stub,
    shown,
)
from tpviz.core.notation import axes_of, parse
from tpviz.devices import make_mesh
from tpviz.errors import TpvizError


@checker("Bytes per device")
def check_bytes_per_device(answer) -> str:
    """bf16[4096, 8192] sharded A[I_X, J_Y] on the mesh {X: 2, Y: 4}."""
    answer = as_number(answer)  # NumPy, JAX, Fraction: the same number
    shape, mesh = (4096, 8192), {"X": 2, "Y": 4}
    expected = layout.bytes_per_device(shape, "bf16", "A[I_X, J_Y]", mesh)
    elements = expected // 2
    if answer == elements:
        raise Wrong(f"{shown(answer)} is the number of elements per device, not bytes.",
                    "A bf16 element takes 2 bytes.")
    if answer == elements * 4:
        raise Wrong(f"{shown(answer)} counts 4 bytes per element (float32).", "bf16 takes 2 bytes.")
    if answer == 4096 * 8192 * 2:
        raise Wrong(f"{shown(answer)} bytes is the whole array.",
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
    row_sums = compiled.compile_for(lambda a: a.sum(axis=1), x_sharded)
    held = compiled.memory(row_sums).argument
    if held != x.nbytes // mesh.size:
        raise Wrong(f"the compiled program's argument takes {held:,} bytes per device, not "
                    f"{x.nbytes // mesh.size:,}: some rows are held more than once.")
    if [c for c in compiled.collectives(row_sums) if c.moves_data]:
        raise Wrong("summing each row needs communication with this layout: rows are split.",
                    "Each device should hold whole rows.")
    return (f"Spec {x_sharded.sharding.spec}: device k holds rows {n}k to {n}k + {n - 1}; the "
            f"compiled row sum takes {held} bytes per device and moves nothing.")


@checker("A global sum with one all-reduce")
def check_total(total, x) -> str:
    """``total(x)`` under ``jax.shard_map``: the sum of all elements, one all-reduce of a scalar."""
    program = call(compiled.compile_for, total, x, what="total(x)")  # traces it once
    result = call(program, x, what="total(x)")
    if np.shape(result) != ():
        raise Wrong(f"total(x) has shape {np.shape(result)}; a sum is a scalar.",
                    "Reduce the block to one number before communicating, and check that "
                    "out_specs says the result is the same on every device.")
    expect_array(result, np.float32(np.asarray(x).sum()), what="total(x)", rtol=1e-4,
                 hint="What can each device compute from its own block alone, and which "
                      "collective then combines the devices' results?")
    found = compiled.collectives(program)
    if found.kinds() != {"all-reduce": 1}:
        raise Wrong(f"the compiled program holds {dict(found.kinds())}; expected one all-reduce.",
                    "Use exactly one jax.lax.psum over 'X'.")
    (op,) = found
    if op.bytes != np.dtype(x.dtype).itemsize:
        raise Wrong(f"your all-reduce moves a {op.dtype}{list(op.shape)} array ({op.bytes} bytes "
                    "per device); a single number would do.",
                    "What could each device do to its block before the all-reduce?")
    return f"One all-reduce of {op.bytes} bytes over {op.group_size} devices."


def _explicit_input():
    mesh = make_mesh((2, 4), ("X", "Y"), axis_types=(AxisType.Explicit,) * 2)
    a = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    return mesh, a, jax.device_put(a, NamedSharding(mesh, PartitionSpec("X", "Y")))


@checker("Reshard in Explicit mode")
def check_explicit_reshard(fn) -> str:
    """``fn(a)`` under ``jax.jit`` on a (2, 4) mesh with Explicit axes X and Y: ``a`` is
    f32[16, 32] typed A[I_X, J_Y]; the result must be the same values typed A[I_XY, J] (rows
    over both axes, X major), moved with one all-to-all of one block along Y."""
    mesh, a, placed = _explicit_input()
    with compat.mesh_context(mesh):
        ran = build.run(fn, mesh, None, None, placed, what="your function")
    out = ran.out
    expect_array(out, a, what="the result", hint="Resharding moves data; it never changes it.")
    want = NamedSharding(mesh, PartitionSpec(("X", "Y"), None))
    spec = getattr(out.sharding, "spec", None)
    if not out.sharding.is_equivalent_to(want, 2):
        swapped = NamedSharding(mesh, PartitionSpec(("Y", "X"), None))
        if out.sharding.is_equivalent_to(swapped, 2):
            raise Wrong(f"the result is typed {spec}: the rows are split with Y major.",
                        "The order inside the tuple decides which axis is major.")
        raise Wrong(f"the result is typed {spec}, not rows over both axes with X major.",
                    "Say the layout you want with jax.sharding.reshard and a PartitionSpec.")
    found = build.moving(ran.program, mesh)
    block = a.nbytes // mesh.size
    if any(c.kind == "all-gather" for c, _ in found):
        raise Wrong(f"right layout, but the compiled program holds {build.summary(found)}: it "
                    "goes through a gathered copy, more bytes than moving one block.",
                    "Go to the target layout in one step.")
    if [(c.kind, c.bytes, axes) for c, axes in found] != [("all-to-all", block, ("Y",))]:
        raise Wrong(f"right layout, but the compiled program holds {build.summary(found)}; one "
                    f"all-to-all of one {block}-byte block along Y suffices.",
                    "Go to the target layout in one step.")
    return (f"Typed {spec}, with one all-to-all of {block} bytes along Y: the columns' split "
            "moved onto the rows.")


@checker("Notation for a block")
def check_block_notation(answer) -> str:
    """The notation of a [8, 32] array on the mesh {X: 2, Y: 4} in which every device holds a
    different [4, 8] block."""
    shape, mesh = (8, 32), {"X": 2, "Y": 4}
    if is_stub(answer):
        raise NotAttempted
    if not isinstance(answer, str):
        raise Wrong(f"give a notation string such as 'A[I_X, J]', not {answer!r}.")
    try:
        block = layout.shard_shape(shape, parse(answer).spec, mesh)
    except TpvizError as e:
        raise Wrong(f"{answer!r} does not fit the mesh: {e}",
                    "Use the mesh axes X and Y, each at most once.") from None
    if block != (4, 8):
        raise Wrong(f"{answer} gives each device a {list(block)} block, not [4, 8].",
                    "How many ways must the rows be cut to leave 4 of 8? The columns, to leave "
                    "8 of 32? Which mesh axis has that size?")
    return f"{answer}: 8 different [4, 8] blocks, one per device, no copies."


_FIT_MESH = {"X": 2, "Y": 4}
_FIT_SHAPES = {"In": (16384, 8192), "W1": (8192, 32768)}  # bf16: 256 MiB and 512 MiB
FIT_BUDGET = 160 * 2**20  # bytes per device for the two arrays together


@checker("Fit two arrays on a mesh")
def check_fit_layout(in_notation, w_notation, bytes_per_device) -> str:
    """Design: lay out In = bf16[16384, 8192] (rows = the batch, split over X and nothing else)
    and W1 = bf16[8192, 32768] on the mesh {X: 2, Y: 4} so that each device holds at most
    160 MiB of the two together; report the bytes one device holds."""
    if any(is_stub(v) for v in (in_notation, w_notation, bytes_per_device)):
        raise NotAttempted
    held = 0
    for name, text in (("In", in_notation), ("W1", w_notation)):
        if not isinstance(text, str):
            raise Wrong(f"give the layout of {name} as a notation string, not {text!r}.")
        try:
            spec = parse(text).spec
            held += layout.bytes_per_device(_FIT_SHAPES[name], "bf16", spec, _FIT_MESH)
        except TpvizError as e:
            raise Wrong(f"{text!r} does not fit the mesh: {e}") from None
        if name == "In" and tuple(axes_of(spec[0] if len(spec) else None)) != ("X",):
            raise Wrong(f"{text} does not split the batch (the rows of In) over X alone.",
                        "Data parallelism over X: the rows of In go over X and over no other axis.")
    expect_number(bytes_per_device, held, what="your bytes per device",
                  hint="For each array: its block's elements (each dimension divided by the "
                       "sizes of its mesh axes) × 2 bytes; then add the two.")
    if held > FIT_BUDGET:
        raise Wrong(f"{held / 2**20:,.0f} MiB per device is over the 160 MiB budget.",
                    "Which of the two can still be cut further? Axes the batch does not use "
                    "can split the other dimension of In, and both dimensions of W1.")
    return (f"{in_notation} and {w_notation}: {held / 2**20:,.0f} MiB per device, within the "
            "160 MiB budget.")
