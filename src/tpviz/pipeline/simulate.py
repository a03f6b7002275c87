"""A dependency-driven simulator: an op starts when its device is free and its inputs are ready.

``F`` of chunk s needs ``F`` of chunk s - 1 (same microbatch); ``B`` of chunk s needs ``B`` of
chunk s + 1 (or the last chunk's ``F``); ``W`` needs the ``B`` of its own chunk. Sending between
devices adds ``p2p`` time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tpviz.core import validate
from tpviz.errors import ScheduleError
from tpviz.pipeline.plan import Op, Schedule, no_gc


@dataclass(frozen=True)
class Timeline:
    """When every op ran. ``starts[d][i]`` is the start of ``schedule.ops[d][i]``."""

    schedule: Schedule
    starts: tuple[tuple[float, ...], ...]
    durations: dict[str, float]  # time of one F, B and W op
    makespan: float
    bubble_fraction: float  # idle device-time / total device-time
    peak_activations: tuple[int, ...]  # per device: most microbatch activations held at once

    def spans(self, device: int) -> list[tuple[Op, float, float]]:
        """(op, start, end) of every op of one device, in order."""
        ops = self.schedule.ops[device]
        return [(op, s, s + self.durations[op.kind])
                for op, s in zip(ops, self.starts[device], strict=True)]


def simulate(sched: Schedule, forward: float = 1.0, backward: float = 2.0,
             p2p: float = 0.0) -> Timeline:
    """Run the schedule on ideal devices.

    Args:
        forward, backward: times of one op through a *full* stage; a chunk of an interleaved
            schedule takes ``1/chunks`` of them. In ``zb-h1`` B and W each take half of backward.
        p2p: time to send an activation or a gradient to another device.

    Raises:
        ScheduleError: the op order deadlocks (an op waits for one that can never run).
    """
    validate.instance("schedule", sched, Schedule, "a Schedule",
                      "Make one with tpviz.pipeline.schedule('1f1b', stages, microbatches).")
    forward = validate.number("forward", forward, positive=True)
    backward = validate.number("backward", backward, positive=True)
    p2p = validate.number("p2p", p2p, minimum=0.0)
    with no_gc():
        return _simulate(sched, forward, backward, p2p)


def _simulate(sched: Schedule, forward: float, backward: float, p2p: float) -> Timeline:
    p, v = sched.stages, sched.chunks
    n = p * v  # chunks in the model
    last = n - 1
    split = sched.has_weight_ops
    cost_f, cost_b = forward / v, backward / v / (2 if split else 1)
    cost_w = backward / v / 2
    # finish times, flat per kind: index microbatch * n + chunk; -1 = not run yet
    size = sched.microbatches * n
    fin_f, fin_b, fin_w = [-1.0] * size, [-1.0] * size, [-1.0] * size
    waiting: dict[tuple[str, int], list[int]] = {}
    free = [0.0] * p
    pos = [0] * p
    starts: list[list[float]] = [[] for _ in range(p)]
    queue = deque(range(p))
    while queue:
        d = queue.popleft()
        ops, i, t, row = sched.ops[d], pos[d], free[d], starts[d]
        count = len(ops)
        while i < count:
            kind, mb, st = ops[i]
            here = mb * n + st
            if kind == "F":
                dep, src, out, c = (fin_f, here - 1, fin_f, cost_f) if st else (None, 0, fin_f,
                                                                                  cost_f)
            elif kind == "B":
                dep, src, out, c = (fin_b, here + 1, fin_b, cost_b) if st < last else (
                    fin_f, here, fin_b, cost_b)
            else:
                dep, src, out, c = fin_b, here, fin_w, cost_w
            start = t
            if dep is not None:
                ready = dep[src]
                if ready < 0:
                    waiting.setdefault((dep is fin_f, src), []).append(d)
                    break
                if p2p and (src % n) % p != d:
                    ready += p2p
                if ready > t:
                    start = ready
            t = start + c
            out[here] = t
            row.append(start)
            i += 1
            if waiting and kind != "W":
                woken = waiting.pop((kind == "F", here), None)
                if woken:
                    queue.extend(woken)
        pos[d], free[d] = i, t
    stuck = [d for d in range(p) if pos[d] < len(sched.ops[d])]
    if stuck:
        op = sched.ops[stuck[0]][pos[stuck[0]]]
        raise ScheduleError(f"the schedule deadlocks: device {stuck[0]} waits forever at {op}.")
    makespan = max(free)
    cost = {"F": cost_f, "B": cost_b, "W": cost_w}
    busy = sum(cost[op[0]] for ops in sched.ops for op in ops)
    return Timeline(sched, tuple(tuple(r) for r in starts), cost, makespan,
                    1 - busy / (p * makespan), tuple(_peak(ops, split) for ops in sched.ops))


def releasing_kind(split: bool) -> str:
    """The op after which a microbatch's saved activations are freed: its B, or its W when the
    weight gradient is split off (W needs the layer's input)."""
    return "W" if split else "B"


def _peak(ops, split: bool) -> int:
    """Most microbatches whose activations a device holds: +1 at F, -1 at the releasing op."""
    release = releasing_kind(split)
    held = peak = 0
    for op in ops:
        if op.kind == "F":
            held += 1
            peak = max(peak, held)
        elif op.kind == release:
            held -= 1
    return peak


def bubble_formula(name: str, stages: int, microbatches: int, chunks: int = 1,
                   forward: float = 1.0, backward: float = 2.0) -> tuple[float, str]:
    """The papers' bubble fraction (idle / total device-time) and the formula, as text.

    naive (p-1)/p; GPipe and 1F1B (p-1)/(m+p-1) (GPipe; PipeDream-Flush); interleaved
    (p-1)/(v m + p-1) (Megatron-LM: (p-1)/(v m) of the ideal time); ZB-H1 with m >= p:
    (p-1) t_F / (m (t_F+t_B+t_W) + (p-1) t_F), where ``backward`` = t_B + t_W, split in halves.
    Qi et al. derive the ZB-H1 idle time (p-1) t_F for t_F = t_B = t_W (their general estimate is
    (p-1)(t_F + t_B - t_W)); with a longer backward the simulator finds more, (p-1) t_B.
    """
    name = validate.choice("name", name, ("naive", "gpipe", "1f1b", "interleaved", "zb-h1"))
    p, m, v = (validate.integer(label, value) for label, value in (
        ("stages", stages), ("microbatches", microbatches), ("chunks", chunks)))
    f = validate.number("forward", forward, positive=True)
    b = validate.number("backward", backward, positive=True)
    if name == "naive":
        return (p - 1) / p, "(p−1)/p"
    if name in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1), "(p−1)/(m+p−1)"
    if name == "interleaved":
        return (p - 1) / (v * m + p - 1), "(p−1)/(v·m+p−1)"
    if name == "zb-h1" and m >= p:
        return (p - 1) * f / (m * (f + b) + (p - 1) * f), "(p−1)t_F/(m(t_F+t_B+t_W)+(p−1)t_F)"
    if name == "zb-h1":
        return float("nan"), "(ZB-H1 formula needs m ≥ p)"
    raise ScheduleError(f"no bubble formula for {name!r}.")
