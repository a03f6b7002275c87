"""Checkers for chapter 8 (asynchronous pipelines and the schedule zoo)."""

from __future__ import annotations

import math

import numpy as np

from tpviz.core.exercises import Wrong, as_integer, as_number, checker
from tpviz.pipeline.simulate import simulate


def _ints(answer, n: int, what: str) -> list[int]:
    if isinstance(answer, str) or not hasattr(answer, "__len__") or len(answer) != n:
        raise Wrong(f"give a list of {n} numbers, one per {what}.")
    return [as_integer(v, f"each {what}'s number") for v in np.asarray(answer).ravel().tolist()]


@checker("Staleness under PipeDream")
def check_staleness(answer) -> str:
    """PipeDream, p = 6: by how many updates is each stage's gradient stale, at most?"""
    got, want = _ints(answer, 6, "stage"), [5, 4, 3, 2, 1, 0]
    if got == [6, 5, 4, 3, 2, 1]:
        raise Wrong("that is the number of versions each stage stashes (p - s), not how far "
                    "behind they are.", "The last stage runs F and B back to back: 0 behind.")
    if got == want[::-1]:
        raise Wrong("reversed: the first stage waits longest for its backward.")
    if got != want:
        raise Wrong(f"{got} is not right.", "Count the updates a stage makes between the "
                    "forward and the backward of one microbatch.")
    return "Stage s is p - 1 - s updates behind; its gradient lands on newer weights."


@checker("Weight memory: PipeDream against 2BW")
def check_weight_memory(pipedream, two_bw) -> str:
    """p = 8 stages: weight copies summed over all stages (units: one stage's weights)."""
    a, b = as_number(pipedream, "PipeDream's total"), as_number(two_bw, "2BW's total")
    if math.isclose(a, 8 * 8):
        raise Wrong("PipeDream: 64 counts p versions on every stage; stage s keeps p - s.")
    if not math.isclose(a, 36):
        raise Wrong(f"PipeDream's total {a:g} is not right.", "Sum p - s over s = 0 … p-1.")
    if math.isclose(b, 8):
        raise Wrong("2BW's total: 8 is one version per stage; 2BW double-buffers.")
    if not math.isclose(b, 16):
        raise Wrong(f"2BW's total {b:g} is not right.", "How many versions does each stage "
                    "keep under 2BW?")
    return "36 against 16: 2BW's memory does not grow with the depth."


MEMORY_CAP = {"stages": 8, "microbatches": 16, "weights": 1.0, "activations": 8,
              "bubble": 0.15}
CANDIDATES = ("1f1b", "zb-h1", "chimera", "zb-h2", "zb-v", "dualpipe", "dualpipev",
              "pipedream", "2bw")


def _fits(name: str):
    from tpviz.pipeline import schedule

    t = simulate(schedule(name, MEMORY_CAP["stages"], MEMORY_CAP["microbatches"]), 1.0, 1.0,
                 1.0)
    v = t.schedule.chunks
    fits = (max(t.weight_copies) <= MEMORY_CAP["weights"] and
            max(t.peak_activations) / v <= MEMORY_CAP["activations"] and max(t.staleness) == 0)
    return t, fits


@checker("Design: a schedule under a memory cap")
def check_memory_cap(name) -> str:
    """p = 8, m = 16, t_F = t_B = t_W: synchronous semantics, at most one stage's weights and
    8 microbatches of full-stage activations per device, and a bubble of at most 15 %. More
    than one schedule meets all four; the check names the reason a schedule fails."""
    if not isinstance(name, str) or name not in CANDIDATES:
        raise Wrong(f"answer with one of the names {', '.join(CANDIDATES)}.")
    t, _ = _fits(name)
    if max(t.staleness):
        raise Wrong(f"{name} is asynchronous: its gradients are stale, so it changes the "
                    "training semantics.")
    if max(t.weight_copies) > MEMORY_CAP["weights"]:
        raise Wrong(f"{name} keeps {max(t.weight_copies):g} stages' weights per device; the "
                    "cap is 1.")
    if max(t.peak_activations) / t.schedule.chunks > MEMORY_CAP["activations"]:
        raise Wrong(f"{name} holds up to {max(t.peak_activations) / t.schedule.chunks:g} "
                    "microbatches of activations on a device; the cap is 8.")
    if t.bubble_fraction > MEMORY_CAP["bubble"]:
        raise Wrong(f"{name} fits the memory, but idles {t.bubble_fraction:.1%} of the time; "
                    "the target is at most 15 %.", "Which schedules fill the bubble without "
                    "holding more?")
    others = [n for n in CANDIDATES if n != name and _fits(n)[1]
              and _fits(n)[0].bubble_fraction <= MEMORY_CAP["bubble"]]
    return (f"{name}: synchronous, one copy of the weights, at most "
            f"{max(t.peak_activations) / t.schedule.chunks:g} microbatches held, bubble "
            f"{t.bubble_fraction:.1%}." + (f" {', '.join(others)} would do too." if others
                                             else ""))


@checker("DualPipe's bubble against 1F1B's")
def check_dualpipe_idle(dualpipe, one_f_one_b) -> str:
    """PP = 8, F = 1, B (full backward) = 2, W = 1, F&B = F + B: idle time per device by
    DeepSeek's table, for DualPipe and for 1F1B."""
    a, b = as_number(dualpipe, "DualPipe's idle"), as_number(one_f_one_b, "1F1B's idle")
    if math.isclose(b, 7 * 2):
        raise Wrong("1F1B: (PP-1)(F+B) with B the full backward, 2.")
    if not math.isclose(b, 21):
        raise Wrong(f"1F1B's idle {b:g} is not right.", "(PP - 1)(F + B).")
    if math.isclose(a, 3 * (3 + 2)):
        raise Wrong("DualPipe: you left out the - 3W (the weight gradients fill bubbles).")
    if not math.isclose(a, 6):
        raise Wrong(f"DualPipe's idle {a:g} is not right.", "(PP/2 - 1)(F&B + B - 3W).")
    return "6 against 21: DualPipe idles 3.5x less, at twice the parameters."
