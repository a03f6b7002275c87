"""Build exercises of the automatic-parallelization chapter, on :mod:`tpviz.core.harness`: the
solver's Megatron choice written as a per-device program (12.4; the shardings alone, the old
12.4, stay checkable), and the resharding GSPMD pays an extra permute for, written by hand in
``shard_map`` (12.9)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.core import harness
from tpviz.core.exercises import Wrong, checker, plain

KEYS = ("x", "w1", "h", "w2", "y")
# the solvers (the ILP, the greedy one, and the cost tables both search) and the library's own
# Megatron layouts: each answers 12.4 for you
SOLVERS = ("tpviz.autoshard.solve.solve", "tpviz.autoshard.solve.solve_problem",
           "tpviz.autoshard.solve.problem", "tpviz.autoshard.compare.greedy",
           "tpviz.autoshard.compare.megatron", "tpviz.autoshard.compare.same_strategies",
           "tpviz.megatron.plan.specs")


def _specs(answer, case) -> dict:
    """The learner's shardings, checked for form and for the exercise's two conditions."""
    specs = plain(harness.guarded(answer, what="your shardings function", names=SOLVERS),
                  "your shardings")
    if not isinstance(specs, dict) or set(specs) != set(KEYS):
        raise Wrong(f"return a dict with the keys {KEYS}, each a PartitionSpec.")
    if not all(isinstance(specs[k], P) for k in KEYS):
        raise Wrong("each value should be a jax.sharding.PartitionSpec, such as P(None, 'X').")
    hint = "Which layouts of W1 and W2 let the gelu run where W1's output already is?"
    for name, key, shape in (("W1", "w1", ("H", "F")), ("W2", "w2", ("F", "H"))):
        if not any(specs[key]):
            whole = case.sizes[shape[0]] * case.sizes[shape[1]] * 4
            raise Wrong(f"every device holds the whole {name} ({whole:,} bytes): the solver's "
                        f"plan splits both weights over the {case.n} devices.", hint)
    if any(specs["y"]):
        raise Wrong("y comes out split; the next block wants it whole on every device.", hint)
    return specs


def _block_program(answer, case):
    specs = _specs(answer, case)
    mesh = case.mesh
    put = {k: NamedSharding(mesh, specs[k]) for k in KEYS}

    def block(x, w1, w2):
        h = jax.lax.with_sharding_constraint(jax.nn.gelu(x @ w1), put["h"])
        return jax.lax.with_sharding_constraint(h @ w2, put["y"])

    try:
        return jax.jit(block, in_shardings=(put["x"], put["w1"], put["w2"]),
                       out_shardings=put["y"])
    except ValueError as e:
        raise Wrong(f"a sharding does not fit its array: {e}") from None


def _block_inputs(s: dict, rng) -> tuple:
    b, h, f = s["B"], s["H"], s["F"]
    return (rng.standard_normal((b, h), dtype=np.float32),
            (rng.standard_normal((h, f)) / np.sqrt(h)).astype(np.float32),
            (rng.standard_normal((f, h)) / np.sqrt(f)).astype(np.float32))


MEGATRON = harness.Build(
    what="the block with your shardings", layouts=("In[B, H]", "W1[H, F]", "W2[F, H]"),
    out=None, axes=("X",), per_device=True, program=_block_program, inputs=_block_inputs,
    reference=lambda x, w1, w2: np.asarray(jax.nn.gelu(x @ w1) @ w2),
    cases=(((8,), {"B": 64, "H": 256, "F": 1024}), ((8,), {"B": 32, "H": 128, "F": 512}),
           ((4,), {"B": 64, "H": 256, "F": 1024})),
    collectives=lambda case: [harness.Expect("all-reduce", case.sizes["B"] * case.sizes["H"] * 4,
                                             ("X",), what="y")],
    hint="Which layouts of W1 and W2 let the gelu run where W1's output already is, with one "
         "sum at the end?",
    praise="The solver's choice: Megatron's column- then row-parallel block, one all-reduce of "
           "y (its g).", rtol=1e-4, atol=1e-5)


@checker("The solver's choice, by hand")
def check_megatron_shardings(fn) -> str:
    """``fn() -> {"x", "w1", "h", "w2", "y": PartitionSpec}`` over a mesh axis "X": no device
    holds a whole weight, y comes out whole, and the block run under ``jax.jit`` with these
    shardings (on 8 and 4 devices, at several sizes, the solver out of reach) equals one device
    and compiles to exactly the solver's collectives (one all-reduce of y)."""
    return harness.grade(fn, MEGATRON)


# --- 12.4 the solver's choice as a per-device program -------------------------------------------
# the solvers, the chapter's runners of a choice, and the Megatron chapter's layers
RUNNERS = (*SOLVERS, "tpviz.autoshard.run.execute", "tpviz.autoshard.run.program",
           "tpviz.autoshard.run.function", "tpviz.megatron.row_parallel",
           "tpviz.megatron.column_parallel", "tpviz.megatron.mlp", "tpviz.megatron.forward",
           "tpviz.megatron.reduce_from_tp_region", "tpviz.mesh2d.run.mlp")


def _solver_program(answer, case):
    """The learner's ``solver_block(mesh)``, called for the case's mesh: it must return the
    program (a ``jax.shard_map``, jitted or not), not the shardings."""
    fn = harness.guarded(answer, case.mesh, what="your solver_block(mesh)", names=RUNNERS)
    if isinstance(fn, dict) or not callable(fn):
        raise Wrong(f"solver_block(mesh) returned {type(fn).__name__}; return the program: a "
                    "jax.shard_map of your per-device block on that mesh, called as "
                    "program(x, w1, w2).", SOLVER_HINT)
    return fn


def _diagnose_block(case, got, want) -> str | None:
    """A program built on a mesh of its own (the notebook's ``mesh8``), not the one given; a y
    averaged over the devices (``pmean``) where the block needs their sum; the exact gelu where
    the solver's graph has ``jax.nn.gelu``'s default, the tanh approximation."""
    devices = getattr(getattr(got, "sharding", None), "device_set", None)
    if devices is not None and set(devices) != set(case.mesh.devices.flat):
        return (f"your program ran on {len(devices)} devices, not on the {case.n} of the mesh "
                "solver_block(mesh) was given: build the shard_map on its argument.")
    y = np.asarray(got) if hasattr(got, "shape") else None
    if (y is not None and y.shape == want.shape and not np.allclose(y, want, rtol=1e-4, atol=1e-5)
            and np.allclose(y * case.n, want, rtol=1e-4, atol=1e-4)):
        return (f"y is {case.n} times too small: the devices' partial sums were averaged, not "
                "added; y is their sum.")
    if y is not None and y.shape == want.shape and not np.allclose(y, want, rtol=1e-4, atol=1e-5):
        x, w1, w2 = (np.asarray(a) for a in case.args)
        exact = np.asarray(jax.nn.gelu(x @ w1, approximate=False) @ w2)
        if np.allclose(y, exact, rtol=1e-4, atol=1e-5):
            return ("y is the block with the exact gelu (approximate=False); the solver's graph "
                    "and this check use jax.nn.gelu as it is, its tanh approximation.")
    return None


SOLVER_HINT = ("The solver printed a strategy per operator: how is each of x, W1, the gelu's "
               "output and W2 split over X? Each device then holds a partial sum of y: "
               "which one collective makes y whole on every device?")
SOLVER_BLOCK = harness.Build(
    what="your block", layouts=("x[B, H]", "W1[H, F_X]", "W2[F_X, H]"), out="y[B, H]",
    axes=("X",), per_device=False, manual=True, program=_solver_program,
    inputs=_block_inputs, reference=lambda x, w1, w2: np.asarray(jax.nn.gelu(x @ w1) @ w2),
    diagnose=_diagnose_block,
    cases=(((8,), {"B": 64, "H": 256, "F": 1024}), ((8,), {"B": 32, "H": 128, "F": 512}),
           ((4,), {"B": 64, "H": 256, "F": 1024}), ((4,), {"B": 24, "H": 40, "F": 96})),
    collectives=lambda case: [harness.Expect("all-reduce", case.sizes["B"] * case.sizes["H"] * 4,
                                             ("X",), what="y")],
    unavailable=RUNNERS, hint=SOLVER_HINT,
    praise="The solver's choice run as it planned: W1 by columns, the gelu where its columns "
           "are, W2 by rows, and one all-reduce of y.", rtol=1e-4, atol=1e-5)


@checker("The solver's choice as a per-device program")
def check_solver_block(fn) -> str:
    """``fn(mesh) -> program``, ``program(x, w1, w2) -> y`` on a mesh of one axis "X": the MLP
    block y = gelu(x·W1)·W2 written as a ``jax.shard_map`` in the layouts the solver chose
    (x whole, W1 by columns, W2 by rows, y whole). On 8 and 4 devices at several sizes, the
    solver and the library's runners out of reach: values against one device, the compiled
    program's input and output shardings, and exactly the solver's one all-reduce of y
    (B·H·4 bytes)."""
    return harness.grade(fn, SOLVER_BLOCK)


# --- 12.9 rows over (X, Y) to rows over Y, by hand ---------------------------------------------
PAIR = ("X", "Y")
RESHARD = ("tpviz.autoshard.strategies.reshard", "tpviz.autoshard.run.execute",
           "tpviz.autoshard.run.program")


def _rows_reference(a, case):
    """Each device's expected block, devices in mesh order: device (x, y) holds rows block y of
    Y's ny blocks, whatever x."""
    nx, ny = case.size("X"), case.size("Y")
    blocks = np.asarray(a).reshape(ny, -1, a.shape[1])
    return np.concatenate([blocks[y] for _ in range(nx) for y in range(ny)])


def _rows_program(answer, case):
    return jax.shard_map(answer, mesh=case.mesh, in_specs=P(PAIR, None),
                         out_specs=P(PAIR, None), check_vma=False)


ROWS = harness.Build(
    what="your resharding", layouts=(P(PAIR, None),), names=("A",), out=P(PAIR, None),
    axes=PAIR, program=_rows_program,
    inputs=lambda s, rng: (rng.standard_normal((s["R"], s["C"]), dtype=np.float32),),
    reference=_rows_reference,
    cases=(((2, 4), {"R": 64, "C": 16}), ((2, 4), {"R": 32, "C": 6}),
           ((4, 2), {"R": 64, "C": 16}), ((2, 2), {"R": 8, "C": 5})),
    out_names=("each device's rows",),
    collectives=lambda case: [
        harness.Expect("collective-permute", case.nbytes("A") // case.n, None,
                       what="one block"),
        harness.Expect("all-gather", case.nbytes("A") // case.size("Y"), ("X",),
                       what="Y's block of rows")],
    unavailable=RESHARD,
    hint="Rows over (X, Y) put block ny·x + y on device (x, y); rows over Y want blocks "
         "nx·y … nx·y + nx − 1 on every device (·, y). Which order of the blocks would let one "
         "gather along X finish the job, and which single exchange reaches it?",
    praise="The compiler's own plan on CPU, by hand: one permute to reorder the blocks, then "
           "one all-gather along X.", rtol=0, atol=0)


@checker("Rows over (X, Y) to rows over Y, by hand")
def check_rows_over_y(fn) -> str:
    """``fn(a)`` per device inside ``shard_map`` on a ("X", "Y") mesh: ``a`` is this device's
    block of ``A`` with rows split over ``(X, Y)``; returns its rows of ``A`` split over ``Y``
    (whole over X). On the 2 × 4, 4 × 2 and 2 × 2 meshes at several sizes; the compiled program
    holds exactly one collective-permute of a block and one all-gather along X."""
    return harness.grade(fn, ROWS)
