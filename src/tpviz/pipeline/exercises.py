"""Checkers for the pipeline chapter."""

from __future__ import annotations

import itertools
import math

import numpy as np

from tpviz.core import harness
from tpviz.core.exercises import Wrong, as_integer, as_number, checker, expect_number, plain
from tpviz.pipeline.builds import SCHEDULES
from tpviz.pipeline.plan import balance, schedule

# the library's exact split: what 7.4 asks the learner to write
BALANCE = ("tpviz.pipeline.plan.balance",)
ORDER_CASES = [(4, 8, 0), (4, 8, 3), (4, 8, 1), (4, 2, 0), (8, 16, 5), (1, 3, 0)]
BALANCE_CASES = [([4, 1, 1, 1, 1, 4], 3), ([1, 2, 3, 4, 5, 6, 7, 8, 9], 3),
                 ([10, 1, 1, 1, 1, 1, 1, 1, 1, 10], 4), ([5, 5, 5, 5], 4),
                 ([2, 2, 2, 2, 2, 2, 2, 9], 2), ([3, 1, 4, 1, 5, 9, 2, 6, 5, 3], 5)]


def _drawn_order(rng) -> tuple[int, int, int]:
    """One (p, m, d) drawn at each check (p ≤ 48, m ≤ 96: about 110,000 cases), not one of
    ORDER_CASES: a table of the library's orders made before the check cannot answer it."""
    while True:
        p = int(rng.integers(2, 49))
        case = (p, int(rng.integers(1, 97)), int(rng.integers(0, p)))
        if case not in ORDER_CASES:
            return case


def _drawn_costs(rng) -> tuple[list[int], int]:
    """One (costs, p) drawn at each check: 6–12 layers of cost 1–9, 2–5 stages."""
    costs = [int(c) for c in rng.integers(1, 10, size=int(rng.integers(6, 13)))]
    return costs, int(rng.integers(2, 6))


@checker("The 1F1B order of one device")
def check_one_f_one_b(fn) -> str:
    """``fn(p, m, d)`` → device d's ops as a list of ``("F", i)`` / ``("B", i)``, on fixed
    cases and one drawn at each check."""
    for p, m, d in [*ORDER_CASES, _drawn_order(np.random.default_rng())]:
        got = plain(harness.guarded(fn, p, m, d, what=f"one_f_one_b({p}, {m}, {d})",
                                    names=SCHEDULES), "your order")
        want = [(op.kind, op.microbatch) for op in schedule("1f1b", p, m).ops[d]]
        try:
            got = [(k, as_integer(i, "a microbatch number")) for k, i in got]
        except (TypeError, ValueError):
            raise Wrong(f"one_f_one_b({p}, {m}, {d}) should return a list of (kind, microbatch) "
                        f"pairs like ('F', 0); it returned {str(got)[:80]}.") from None
        kinds = {k for k, _ in got}
        if kinds - {"F", "B"}:
            odd = sorted(map(repr, kinds - {"F", "B"}))
            raise Wrong(f"one_f_one_b({p}, {m}, {d}) uses the kinds {', '.join(odd)}; write each "
                        "op's kind as the capital letter 'F' (forward) or 'B' (backward).")
        if got == want:
            continue
        gpipe = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        if got == gpipe:
            raise Wrong(f"for p={p}, m={m}, d={d} that is GPipe's order (all forwards, then all "
                        "backwards): it holds all m microbatches' activations.",
                        "Run only p - d - 1 forwards first, then alternate F and B.")
        warm = next((k for k, (kind, _) in enumerate(got) if kind == "B"), len(got))
        if warm != min(p - d, m):
            raise Wrong(f"for p={p}, m={m}, d={d} your device runs {warm} forwards before its "
                        f"first backward; it should run {min(p - d, m)}.",
                        "Device d warms up with p - d - 1 forwards, then one more forward, then "
                        "its first backward.")
        at = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                  min(len(got), len(want)))
        raise Wrong(f"for p={p}, m={m}, d={d} the order differs from 1F1B at position {at}: "
                    f"you have {got[at:at + 4]}, expected {want[at:at + 4]}.",
                    "After the warm-up: F, B, F, B … then the remaining backwards.")
    return "Device d never holds more than p - d microbatches."


@checker("Bubble fraction of GPipe")
def check_bubble(answer) -> str:
    """GPipe with p = 8 stages and m = 32 microbatches: idle share of the total device-time."""
    answer = as_number(answer)  # NumPy, JAX, Fraction: the same number
    p, m = 8, 32
    if math.isclose(answer, (p - 1) / m):
        raise Wrong("that is (p-1)/m: the bubble relative to the ideal (bubble-free) time.",
                    "As a share of the total time, divide by (m + p - 1) instead.")
    if math.isclose(answer, (p - 1) / p):
        raise Wrong("that is the naive schedule's bubble (one microbatch at a time).",
                    "With m microbatches the pipeline fills: (p-1)/(m+p-1).")
    expect_number(answer, (p - 1) / (m + p - 1), hint="(p - 1) / (m + p - 1)")
    return f"{answer:.1%} of the device-time is bubble."


@checker("Microbatches for a 5 % bubble")
def check_microbatches(answer) -> str:
    """The fewest microbatches m for which 1F1B on p = 8 stages idles at most 5 % of the time."""
    answer = as_integer(answer, "your answer")  # NumPy and JAX integers too
    p, target = 8, 0.05
    want = next(m for m in range(1, 10_000) if (p - 1) / (m + p - 1) <= target + 1e-12)
    if answer == math.ceil((p - 1) / target):
        raise Wrong(f"{answer} makes (p-1)/m = 5 %: that is the bubble relative to the ideal "
                    "time, not the share of the total time.",
                    "Solve (p-1)/(m+p-1) <= 0.05 for m.")
    if answer > want:
        raise Wrong(f"{answer} works, but fewer microbatches also do.",
                    "Find the smallest m with (p-1)/(m+p-1) <= 0.05.")
    expect_number(answer, want, hint="Solve (p-1)/(m+p-1) <= 0.05 for the smallest integer m.")
    return f"m = {want}: bubble {(p - 1) / (want + p - 1):.2%}."


@checker("Balanced stages")
def check_balance(fn) -> str:
    """``fn(costs, p)`` → how many consecutive layers each of the p stages gets, on fixed cases
    and one drawn at each check."""
    for costs, p in [*BALANCE_CASES, _drawn_costs(np.random.default_rng())]:
        sizes = plain(harness.guarded(fn, list(costs), p, what=f"your function on {costs}, p={p}",
                                      names=BALANCE), "your split")
        try:
            sizes = [as_integer(k, "each layer count") for k in sizes]
        except (TypeError, ValueError):
            raise Wrong(f"return a list of {p} layer counts, e.g. [2, 3, 1]; got "
                        f"{str(sizes)[:60]}.") from None
        if len(sizes) != p or sum(sizes) != len(costs) or min(sizes) < 1:
            raise Wrong(f"for {costs} and p={p} you returned {sizes}: it should be {p} counts, "
                        f"each at least 1, summing to {len(costs)} layers.")
        edges = [0]
        for k in sizes:
            edges.append(edges[-1] + k)
        slowest = max(sum(costs[a:b]) for a, b in itertools.pairwise(edges))
        best = balance(costs, p).slowest
        if slowest > best:
            raise Wrong(f"for {costs} and p={p} your split {sizes} has a slowest stage of "
                        f"{slowest}; a split with {best:g} exists.",
                        "Greedy filling is not exact: try every last cut (dynamic programming), "
                        "or binary-search the answer.")
    return "Your splits are optimal on every case."


WEIGHT_STAGES = 6  # 7.5: the chapter shows 1F1B's memory at p = 4 only


@checker("Weight versions in PipeDream")
def check_weight_versions(answer) -> str:
    """PipeDream (1F1B without flushes, weight stashing), p = 6: the most weight versions each
    stage keeps (the newest and the stashed ones), stage 0 first."""
    p = WEIGHT_STAGES
    want = [p - s for s in range(p)]
    if isinstance(answer, str) or not hasattr(answer, "__len__") or len(answer) != p:
        raise Wrong(f"give a list of {p} numbers, one per stage.")
    answer = [as_integer(v, "each stage's count") for v in np.asarray(answer).ravel().tolist()]
    if answer == [2] * p:
        raise Wrong("that is PipeDream-2BW, which updates weights only every few microbatches.",
                    "PipeDream keeps one version per microbatch in flight on the stage.")
    if answer == want[::-1]:
        raise Wrong("reversed: the first stage has the most microbatches in flight.")
    if answer == [v - 1 for v in want]:
        raise Wrong("one short on every stage: that counts the stashed versions, or the "
                    "updates a gradient is late, without the version the stage uses now.",
                    "Count every version a stage holds at once, the newest included.")
    if answer != want:
        raise Wrong(f"{answer} is not right.",
                    "A stage keeps the weights each in-flight microbatch saw in its forward. "
                    "How many microbatches has a stage started but not finished, at most?")
    return "Stage s keeps p - s versions; the last stage needs no stash."


PIPELINE_DESIGN = {"stages": 8, "layers": 48, "most_microbatches": 32, "bubble": 0.07,
                   "sends": 800}


def design_options() -> list[tuple[int, int]]:
    """Every admissible (m, v) of 7.8: m a multiple of p up to 32, v dividing the 6 layers of a
    device, bubble (p−1)/(v·m+p−1) within the target and m(v·p−1) sends within the cap."""
    d = PIPELINE_DESIGN
    p, per_device = d["stages"], d["layers"] // d["stages"]
    return [(m, v) for v in range(1, per_device + 1) if per_device % v == 0
            for m in range(p, d["most_microbatches"] + 1, p)
            if (p - 1) / (v * m + p - 1) <= d["bubble"] and m * (v * p - 1) <= d["sends"]]


@checker("Design: microbatches and chunks for a bubble and a send budget")
def check_pipeline_design(microbatches, chunks, sends) -> str:
    """p = 8 stages, 48 equal layers, at most 32 microbatches per step (a multiple of p for
    interleaving), v chunks per device dividing the 6 layers a device holds: an (m, v) whose
    bubble (p−1)/(v·m+p−1) is at most 7 % and whose activation sends per step, m(v·p−1),
    are at most 800, with that number of sends. Several (m, v) are admissible."""
    m, v, sends = (as_integer(x, what) for x, what in (
        (microbatches, "microbatches"), (chunks, "chunks"), (sends, "sends")))
    d = PIPELINE_DESIGN
    p, per_device = d["stages"], d["layers"] // d["stages"]
    if not (p <= m <= d["most_microbatches"]) or m % p or v < 1 or per_device % v:
        raise Wrong(f"(m, v) = ({m}, {v}) is not allowed.",
                    "m must be a multiple of 8 up to 32, and v must divide 6.")
    bubble = (p - 1) / (v * m + p - 1)
    if bubble > d["bubble"]:
        raise Wrong(f"(m, v) = ({m}, {v}) leaves a bubble of {bubble:.1%}, over 7 %.",
                    "Which products v·m reach the bubble target?")
    moved = m * (v * p - 1)
    if sends == m * (p - 1) and v > 1:
        raise Wrong(f"{sends} counts the sends between stages; with {v} chunks a microbatch "
                    "crosses between devices at every chunk boundary.",
                    "Count the chunk boundaries a microbatch crosses: v·p − 1.")
    expect_number(sends, moved, what="your number of activation sends",
                  hint="Count the chunk boundaries a microbatch crosses between devices.")
    if moved > d["sends"]:
        raise Wrong(f"(m, v) = ({m}, {v}) meets the bubble target, but sends {moved} "
                    "activations per step, over 800.",
                    "Sends grow with m(v·p − 1): trade microbatches against chunks.")
    others = [o for o in design_options() if o != (m, v)]
    also = (" " + " and ".join(f"(m, v) = {o}" for o in others) + " would do too: more "
            "microbatches each smaller, or more chunks and their sends." if others else "")
    return (f"m = {m}, v = {v}: bubble {bubble:.1%}, {moved} activation sends per step (and as "
            f"many gradients back).{also}")
