"""Checkers for chapter 0: devices, meshes and shardings."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from tpviz.core import compiled, harness, layout
from tpviz.core.exercises import (
    NotAttempted,
    Wrong,
    as_integer,
    as_number,
    checker,
    expect_array,
    expect_bytes,
    is_stub,
    shown,
)
from tpviz.core.harness_report import compare
from tpviz.core.notation import axes_of, parse
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
    expect_bytes(answer, expected, what="your answer",
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
    if tuple(mesh.axis_names) != ("X", "Y") or tuple(mesh.devices.shape) != (2, 4):
        raise Wrong(f"x_sharded sits on the mesh {dict(mesh.shape)}; the exercise asks for the "
                    "(2, 4) mesh with axes X (size 2) and Y (size 4), and rows split over both.",
                    "Use the chapter's mesh, whose axes are X and Y.")
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


def _rows(s: dict, rng) -> tuple[np.ndarray]:
    return (rng.standard_normal((s["rows"], s["cols"]), dtype=np.float32),)


TOTAL = harness.Build(
    what="total(x)", layouts=("x[I_X, J]",), out=None, axes=("X",), per_device=False,
    manual=True, inputs=_rows, reference=lambda x: np.float32(x.sum(dtype=np.float64)),
    cases=(((8,), {"rows": 16, "cols": 5}), ((8,), {"rows": 24, "cols": 3})),
    collectives=lambda case: [harness.Expect("all-reduce", 4, ("X",), what="one number")],
    hint="What can each device compute from its own block alone, and which collective then "
         "combines the devices' results? Check that out_specs says the result is the same on "
         "every device.",
    praise="Each device summed its own block; one number per device was all-reduced.")


@checker("A global sum with one all-reduce")
def check_total(total, x) -> str:
    """``total`` is ``jax.shard_map`` over the chapter's 8-device axis "X" with x[I_X, J]: the
    sum of all elements, a scalar, with one all-reduce of one number. ``x`` is the notebook's
    array; the check sums arrays of its own."""
    return harness.grade(total, TOTAL)


def _trend(s: dict, rng) -> tuple[np.ndarray]:
    """Rows that drift: the blocks' means differ, so a mean of per-device variances is wrong."""
    x = rng.standard_normal((s["rows"], s["cols"]), dtype=np.float32)
    return (x + np.float32(0.5) * np.arange(s["rows"], dtype=np.float32)[:, None] + 3,)


def _calls(jaxpr) -> list[str]:
    """The collectives a traced program calls, in order, looking into nested jaxprs."""
    found = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name.startswith(("psum", "pmax", "pmin", "all_", "ppermute", "reduce_scatter")):
            found.append(name)
        for v in eqn.params.values():
            inner = getattr(v, "jaxpr", v)
            if hasattr(inner, "eqns"):
                found += _calls(inner)
    return found


def _one_call(case, trace) -> str | None:
    """The compiler merges two all-reduces into one; the learner's program must call one."""
    calls = _calls(trace(tuple(case.mesh.devices.shape), case.args).jaxpr)
    return None if len(calls) < 2 else (
        f"your block_stats calls {len(calls)} collectives ({', '.join(calls)}; a psum of a "
        "tuple or list is one per element); the compiler merged them into one here, but the "
        "exercise asks your program for one. Put what each device contributes into one array")


MOMENTS = harness.Build(
    what="block_stats", layouts=("x[I_X, J]",), out=None, axes=("X",), manual=True,
    program=lambda fn, case: jax.shard_map(fn, mesh=case.mesh, in_specs=PartitionSpec("X"),
                                           out_specs=(PartitionSpec(), PartitionSpec()),
                                           check_vma=False),
    traced=_one_call, inputs=_trend, out_names=("the mean", "the variance"),
    extra=lambda case, found: "the exercise needs one all-reduce, not several" if sum(
        c.kind == "all-reduce" for c, _ in found) > 1 else compare(
        found, [harness.Expect("all-reduce", 8, ("X",), what="")]),  # no merge: say so first
    reference=lambda x: tuple(np.float32(f(x, dtype=np.float64)) for f in (np.mean, np.var)),
    cases=(((8,), {"rows": 16, "cols": 5}), ((8,), {"rows": 24, "cols": 3}),
           ((4,), {"rows": 12, "cols": 4})),
    hint="The mean and the variance of all elements follow from three global numbers: their "
         "count, their sum and the sum of their squares. Which of these can each device "
         "compute from its own block, which does it know without asking, and how do you "
         "combine the rest across X in one collective?", atol=2e-4,
    praise="Each device reduced its block to two numbers; one all-reduce combined them.")


@checker("Global mean and variance with one all-reduce")
def check_global_moments(block_stats) -> str:
    """``block_stats(block)`` is the per-device function of a ``jax.shard_map`` over a 1-D
    mesh "X" with x[I_X, J]: it returns ``(mean, var)`` of all elements of x (the population
    variance), the same on every device, with one all-reduce of two float32 numbers; on 8 and
    4 devices at several sizes."""
    return harness.grade(block_stats, MOMENTS)


def _y_major(case, got, want) -> str | None:
    w, (nx, ny) = np.asarray(want), case.mesh.devices.shape  # Y-major blocks, read either way
    if isinstance(got, jax.Array) and any(np.array_equal(np.asarray(got), w.reshape(
            len(w), a, b, -1).swapaxes(1, 2).reshape(w.shape)) for a, b in ((ny, nx), (nx, ny))):
        return "every column is there, but the column blocks are in Y-major order (A[I, J_YX])"
    return None


RESHARD = harness.Build(
    what="your function", layouts=("A[I_X, J_Y]",), out="A[I_XY, J]", axes=("X", "Y"),
    per_device=False, manual=True, explicit=True, placed=True, inputs=_rows,
    reference=lambda a: a,
    cases=(((2, 4), {"rows": 16, "cols": 32}), ((2, 4), {"rows": 8, "cols": 12}),
           ((4, 2), {"rows": 24, "cols": 8})),
    collectives=lambda case: [harness.Expect(
        "all-to-all", case.nbytes("A") // case.n, ("Y",), what="one block")],
    hint="Resharding moves data and never changes it. In A[I_X, J_Y] a device's block has some of "
         "the rows its row group needs and some of the columns; in A[I_XY, J] it has fewer rows, "
         "all columns. Which pieces of its block must go to which device of Y?",
    praise="Typed A[I_XY, J]: each device sent a piece of its block to every other device of Y.")


@checker("Reshard in Explicit mode")
def check_explicit_reshard(fn) -> str:
    """``fn(a)`` under ``jax.jit`` with an Explicit mesh (X, Y) as the current mesh: ``a`` is
    typed A[I_X, J_Y]; the result must be the same values typed A[I_XY, J] (rows over both axes,
    X major), moved by a ``jax.shard_map`` the learner writes, with one all-to-all of one block
    along Y; on the (2, 4) and (4, 2) meshes at several sizes."""
    return harness.grade(fn, RESHARD)


COLUMNS = harness.Build(
    what="to_columns", layouts=("A[I_X, J_Y]",), out="A[I, J_XY]", axes=("X", "Y"),
    per_device=False, manual=True, explicit=True, placed=True, inputs=_rows,
    reference=lambda a: a, diagnose=_y_major,
    cases=(((2, 4), {"rows": 16, "cols": 32}), ((2, 4), {"rows": 8, "cols": 24}),
           ((4, 2), {"rows": 24, "cols": 16})),
    collectives=lambda case: [
        harness.Expect("all-to-all", case.nbytes("A") // case.n, ("Y",), what="one block"),
        harness.Expect("all-to-all", case.nbytes("A") // case.n, ("X", "Y"),
                       what="one block")],
    hint="Data only moves, never changes. Which layout can you reach from A[I_X, J_Y] with one "
         "all-to-all along one axis, and from which layout is A[I, J_XY] one all-to-all over "
         "the whole mesh away? Each device sends its block twice, in pieces, and gathers nothing.",
    praise="Typed A[I, J_XY] in two all-to-alls: each device sent its block twice, in pieces.")


@checker("Reshard to columns over the whole mesh")
def check_reshard_columns(fn) -> str:
    """``fn(a)`` under ``jax.jit`` with an Explicit mesh (X, Y) as the current mesh: ``a`` is
    typed A[I_X, J_Y]; the result must be the same values typed A[I, J_XY] (columns over both
    axes, X major), moved by a ``jax.shard_map`` the learner writes with two all-to-alls of one
    block each (along Y, then over X and Y); on the (2, 4) and (4, 2) meshes."""
    return harness.grade(fn, COLUMNS)


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
    expect_bytes(bytes_per_device, held, what="your bytes per device",
                  hint="For each array: its block's elements (each dimension divided by the "
                       "sizes of its mesh axes) × 2 bytes; then add the two.")
    if held > FIT_BUDGET:
        raise Wrong(f"{held / 2**20:,.0f} MiB per device is over the 160 MiB budget.",
                    "Which of the two can still be cut further? Axes the batch does not use "
                    "can split the other dimension of In, and both dimensions of W1.")
    return (f"{in_notation} and {w_notation}: {held / 2**20:,.0f} MiB per device, within the "
            "160 MiB budget.")
