"""Checkers for chapter 3: sharded matrix multiplication."""

from __future__ import annotations

import math

import numpy as np

from tpviz.core import cost, harness, layout
from tpviz.core.collectives import Collective
from tpviz.core.exercises import (
    NotAttempted,
    Wrong,
    as_number,
    checker,
    expect_bytes,
    expect_number,
    is_stub,
)
from tpviz.errors import ShardingError, TpvizError
from tpviz.matmul.plan import plan

MESH = {"X": 2, "Y": 4}
# Which case of the chapter applies? (In sharding, W1 sharding) on the mesh {X: 2, Y: 4}
CASES = {"a": ("In[B_X, D]", "W1[D, F_Y]"), "b": ("In[B, D_Y]", "W1[D, F]"),
         "c": ("In[B_X, D_Y]", "W1[D_Y, F]"), "d": ("In[B_X, D]", "W1[D, F_X]"),
         "e": ("In[B_Y, D]", "W1[D_Y, F]"), "f": ("In[B_X, D_Y]", "W1[D, F_Y]")}


def _case(x: str, w: str) -> int:
    try:
        return plan((64, 64), (64, 64), x, w, MESH).case
    except ShardingError:
        return 4


def _xw(s: dict, rng) -> tuple[np.ndarray, np.ndarray]:
    return (rng.standard_normal((s["B"], s["D"]), dtype=np.float32),
            rng.standard_normal((s["D"], s["F"]), dtype=np.float32))


def _product(x, w):
    return np.asarray(x) @ np.asarray(w)


# Exercises 3.1 and 3.2: whole programs on the chapter's 8-device mesh; the checker's own
# arrays at two sizes (not the notebook's [16, 32] · [32, 64])
_WHOLE = dict(axes=("X",), per_device=False, manual=True, inputs=_xw, reference=_product,
              cases=(((8,), {"B": 24, "D": 40, "F": 16}), ((8,), {"B": 8, "D": 16, "F": 72})),
              unavailable=("tpviz.matmul.explicit", "tpviz.matmul.gspmd"), rtol=1e-4, atol=1e-3)
COLUMN = harness.Build(
    what="your program", layouts=("In[B, D]", "W1[D, F_X]"), out="Out[B, F_X]",
    collectives=lambda case: [],
    hint="Which operand does every device hold whole, and which is split by columns? Say so in "
         "in_specs, and how Out comes back in out_specs.",
    praise="Each device multiplied In by its own columns of W1.", **_WHOLE)
SCATTER = harness.Build(
    what="your program", layouts=("In[B, D_X]", "W1[D_X, F]"), out="Out[B, F_X]",
    collectives=lambda case: [harness.Expect("reduce-scatter", case.sizes["B"] * case.sizes["F"]
                                             * 4, ("X",), what="the partial product")],
    hint="After the local product each device holds a partial sum of all of Out. Which "
         "collective adds the partial sums and splits the result in one step, and along which "
         "dimension of Out should it split?",
    praise="The partial sums added and split in one step, half an all-reduce's bytes.", **_WHOLE)


@checker("Column-parallel matmul")
def check_column_parallel(fn, x, w) -> str:
    """In[B, D] · W1[D, F_X] → Out[B, F_X] under shard_map on the 8-device mesh, without
    communication. ``x`` and ``w`` are the notebook's arrays: the check makes its own."""
    return harness.grade(fn, COLUMN)


@checker("Reduce-scatter matmul")
def check_reduce_scatter(fn, x, w) -> str:
    """In[B, D_X] · W1[D_X, F] → Out[B, F_X] with a single reduce-scatter."""
    return harness.grade(fn, SCATTER)


@checker("Bytes of an all-gather")
def check_all_gather_bytes(answer) -> str:
    """In = bf16[1024, 4096] as In[B_X, D_Y], W1[D, F]: bytes per device after the all-gather."""
    answer = as_number(answer)  # NumPy, JAX, Fraction: the same number
    p = plan((1024, 4096), (4096, 4096), "In[B_X, D_Y]", "W1[D, F]", MESH, dtype="bf16")
    (gather,) = p.collectives
    if answer == 512 * 1024 * 2:
        raise Wrong("that is the block each device holds before the all-gather.",
                    "After gathering along D each device holds all of D for its rows.")
    if answer == 1024 * 4096 * 2:
        raise Wrong("that is the whole of In.", "B stays split over X: only D is gathered.")
    expect_bytes(answer, gather.bytes,
                  hint="After gathering along D, which dimension of In is still split, and "
                       "over how many devices?")
    return f"Each device ends with In[B_X, D]: {gather.bytes:,} bytes."


@checker("Which case applies")
def check_cases(answers) -> str:
    """A dict from the keys of ``CASES`` to 1, 2, 3 or 4. The message never says which key is
    wrong (that would let six tries of each key find the answer)."""
    if not isinstance(answers, dict) or set(answers) != set(CASES):
        raise Wrong(f"give a dict with the keys {sorted(CASES)}, e.g. {{'a': 1, ...}}.")
    if any(answers[k] not in (1, 2, 3, 4) for k in CASES):
        raise Wrong("each answer is one of the case numbers 1, 2, 3 or 4.")
    if any(answers[k] != _case(x, w) for k, (x, w) in CASES.items()):
        raise Wrong("not all of them are right (the check does not say which).",
                    "For each product look at D first: sharded in neither, one, or both "
                    "operands? Then: do B and F share a mesh axis? And if D's axis shards a "
                    "non-contracting dimension of the other operand, which one must move?")
    return f"All {len(CASES)} right."


FSDP = harness.Build(
    what="your per-device matmul", layouts=("In[B_X, D]", "W1[D_X, F]"), out="Out[B_X, F]",
    axes=("X",), inputs=_xw, reference=_product, rtol=1e-4, atol=1e-3,
    cases=(((8,), {"B": 16, "D": 32, "F": 24}), ((8,), {"B": 24, "D": 16, "F": 40}),
           ((4,), {"B": 8, "D": 32, "F": 24})),
    collectives=lambda case: [harness.Expect("all-gather", case.nbytes("W1"), ("X",),
                                             what="W1")],
    unavailable=("tpviz.matmul.explicit", "tpviz.matmul.gspmd"),
    hint="Each device has its own rows of In but only 1/N of the rows of W1 (of D). Which operand "
         "must it complete before multiplying, and along which dimension?",
    praise="Case 2, as FSDP runs it for every layer.")


@checker("FSDP's matmul: case 2")
def check_fsdp_matmul(fn) -> str:
    """``fn(x_rows, w_rows)`` per device along "X": In[B_X, D] · W1[D_X, F] → Out[B_X, F], on 8
    and 4 devices at several sizes; the compiled program holds one all-gather of W1 along D,
    nothing else."""
    return harness.grade(fn, FSDP)


@checker("Where latency and bandwidth cost the same")
def check_latency_crossover(answer) -> str:
    """All-reduce over N = 16 devices, α = 2 µs per step, W = 4.5e11 B/s: the array size V (in
    bytes) at which the latency term equals the bandwidth term."""
    n, alpha, bandwidth = 16, 2e-6, 4.5e11
    one = Collective("all-reduce", 1, n)  # per byte of V
    expected = one.steps * alpha * bandwidth / one.sent_bytes  # = N α W
    hint = ("Write both terms of the α–β time for an all-reduce of V bytes on a ring, set them "
            "equal and solve for V.")
    if is_stub(answer):
        raise NotAttempted
    if isinstance(answer, int | float) and math.isclose(answer, (n - 1) * alpha * bandwidth,
                                                         rel_tol=1e-3):
        raise Wrong("that takes the bandwidth term as 2V/W; the ring sends 2(N-1)/N · V.", hint)
    if isinstance(answer, int | float) and math.isclose(answer, alpha * bandwidth, rel_tol=1e-3):
        raise Wrong("that counts one step of latency; a ring all-reduce takes 2(N-1) steps.", hint)
    expect_number(answer, expected, rel=1e-3, hint=hint)
    return (f"V* = N·α·W = {expected / 1e6:,.1f} MB: below it an all-reduce costs mostly "
            "latency, above it mostly bandwidth.")


DESIGN = dict(b=8192, d=8192, f=32768, mesh={"X": 2, "Y": 4}, dtype="bf16",
              system="TPU v5e (ICI)", memory=256 * 2**20, seconds=3e-3)


def design_cost(x_notation: str, w_notation: str) -> tuple[int, float]:
    """Bytes one device holds (its blocks of In, W1 and Out, and what the all-gathers bring) and
    the overlapped time of the cost model, for the design problem's shapes."""
    c = DESIGN
    p = plan((c["b"], c["d"]), (c["d"], c["f"]), x_notation, w_notation, c["mesh"],
             dtype=c["dtype"])
    size = layout.dtype_size(c["dtype"])
    held = size * sum(math.prod(s) for s in (p.x_block, p.w_block, p.y_block))
    held += sum(g.bytes for g in p.collectives if g.kind == "all-gather")
    seconds = cost.estimate(p.flops, p.collectives, cost.SYSTEMS[c["system"]]).overlapped_s
    return held, seconds


@checker("Design: shard a layer under a memory and a time budget")
def check_matmul_design(x_notation, w_notation, bytes_per_device, milliseconds) -> str:
    """In = bf16[8192, 8192] · W1 = bf16[8192, 32768] on the mesh {X: 2, Y: 4} of TPU v5e:
    at most 256 MiB per device and 3 ms (cost model, overlapped); the time in milliseconds."""
    if any(is_stub(v) for v in (x_notation, w_notation, bytes_per_device, milliseconds)):
        raise NotAttempted
    try:
        held, time = design_cost(x_notation, w_notation)
    except TpvizError as e:
        raise Wrong(f"{x_notation} · {w_notation} is not a valid plan: {e}") from None
    expect_bytes(bytes_per_device, held, what="your bytes per device",
                  hint="Add the blocks of In, W1 and Out one device holds, and any operand it "
                       "all-gathers; 2 bytes per element.")
    expect_number(milliseconds, time * 1e3, what="your time in ms", rel=0.02,
                  hint="The larger of FLOPs / R and the collectives' bytes sent / W.")
    if held > DESIGN["memory"]:
        raise Wrong(f"{held / 2**20:,.0f} MiB per device is over the 256 MiB budget.",
                    "Which array is held whole, or appears as a large partial sum? Split it.")
    if time > DESIGN["seconds"]:
        raise Wrong(f"{time * 1e3:.2f} ms is over the 3 ms budget.",
                    "Can you avoid moving a large array at all?")
    return (f"{x_notation} · {w_notation}: {held / 2**20:,.0f} MiB per device, "
            f"{time * 1e3:.2f} ms; within both budgets.")
