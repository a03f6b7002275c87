"""A dependency-driven simulator: an op starts when its device is free and its inputs are ready.

``F`` of chunk s needs ``F`` of chunk s - 1 (same microbatch); ``B`` of chunk s needs ``B`` of
chunk s + 1 (or the last chunk's ``F``); ``W`` needs the ``B`` of its own chunk; ``BW`` (a full
backward in a schedule that also splits some, DualPipe's) needs what ``B`` needs. Sending
between devices adds ``p2p`` time. The timeline also says which weight version every op read
(:mod:`tpviz.pipeline.versions`): the staleness and weight copies of each device.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tpviz.core import validate
from tpviz.errors import ScheduleError
from tpviz.pipeline import versions as _versions
from tpviz.pipeline.plan import Op, Schedule, no_gc


@dataclass(frozen=True)
class Timeline:
    """When every op ran. ``starts[d][i]`` is the start of ``schedule.ops[d][i]``."""

    schedule: Schedule
    starts: tuple[tuple[float, ...], ...]
    durations: dict[str, float]  # time of one F, B, W and BW op
    makespan: float
    bubble_fraction: float  # idle device-time / total device-time
    peak_activations: tuple[int, ...]  # per device: most microbatch activations held at once
    versions: tuple[tuple[int, ...], ...] = ()  # versions[d][i]: weight version op i reads
    staleness: tuple[int, ...] = ()  # per device (stage): most updates a gradient is behind
    weight_copies: tuple[float, ...] = ()  # per device: versions kept x stages held

    @property
    def steady_bubble(self) -> float:
        """Idle share of each device's own span (its first op's start to its last op's end),
        summed over devices: the bubble left when steps overlap, as when Qi et al. bypass the
        optimizer step's synchronization and the next step's ops fill the skew."""
        busy = span = 0.0
        for d in range(self.schedule.stages):
            spans = self.spans(d)
            if spans:
                span += spans[-1][2] - spans[0][1]
                busy += sum(e - s for _, s, e in spans)
        return 1 - busy / span if span else 0.0

    def work(self, device: int) -> float:
        """Compute time of one device (the sum of its ops)."""
        return sum(e - s for _, s, e in self.spans(device))

    def spans(self, device: int) -> list[tuple[Op, float, float]]:
        """(op, start, end) of every op of one device, in order."""
        ops = self.schedule.ops[device]
        return [(op, s, s + self.durations[op.kind])
                for op, s in zip(ops, self.starts[device], strict=True)]


def simulate(sched: Schedule, t_f: float | None = None, t_b: float | None = None,
             t_w: float | None = None, *, p2p: float = 0.0, forward: float | None = None,
             backward: float | None = None) -> Timeline:
    """Run the schedule on ideal devices.

    Args:
        t_f: time of one forward through a *full* stage (default 1); a chunk of a schedule
            with v chunks per device takes ``1/v`` of it. ``forward=`` is the same argument.
        t_b: without ``t_w``: the whole backward (default 2; ``backward=`` is the same), split
            in halves where a schedule separates B and W. With ``t_w``: the input-gradient
            part B alone.
        t_w: the weight-gradient part W (Qi et al.'s T_W); an unsplit backward takes t_b + t_w.
        p2p: time to send an activation or a gradient to another device.

    Raises:
        ScheduleError: the op order deadlocks (an op waits for one that can never run).
    """
    validate.instance("schedule", sched, Schedule, "a Schedule",
                      "Make one with tpviz.pipeline.schedule('1f1b', stages, microbatches).")
    for alias, value, main in (("forward", forward, t_f), ("backward", backward, t_b)):
        if value is not None and main is not None:
            raise ScheduleError(f"give the {alias} time once: as {alias}= or positionally.")
    forward = next(x for x in (forward, t_f, 1.0) if x is not None)
    backward = next(x for x in (backward, t_b, 2.0) if x is not None)
    forward = validate.number("forward", forward, positive=True)
    backward = validate.number("backward", backward, positive=True)
    p2p = validate.number("p2p", p2p, minimum=0.0)
    if t_w is None:
        half = backward / (2 if sched.has_weight_ops else 1)
        costs = {"F": forward, "B": half, "W": backward / 2, "BW": backward}
    else:
        t_w = validate.number("t_w", t_w, positive=True)
        costs = {"F": forward, "B": backward if sched.has_weight_ops else backward + t_w,
                 "W": t_w, "BW": backward + t_w}
    with no_gc():
        return _simulate(sched, {k: c / sched.chunks for k, c in costs.items()}, p2p)


def _simulate(sched: Schedule, cost: dict[str, float], p2p: float) -> Timeline:
    p, v = sched.stages, sched.chunks
    n = p * v  # chunks in the model
    last = n - 1
    split = sched.has_weight_ops
    cost_f, cost_b, cost_w, cost_bw = cost["F"], cost["B"], cost["W"], cost["BW"]
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
            elif kind == "B" or kind == "BW":
                c = cost_b if kind == "B" else cost_bw
                dep, src, out = (fin_b, here + 1, fin_b) if st < last else (fin_f, here, fin_b)
            else:
                dep, src, out, c = fin_b, here, fin_w, cost_w
            start = t
            if dep is not None:
                ready = dep[src]
                if ready < 0:
                    waiting.setdefault((dep is fin_f, src), []).append(d)
                    break
                if p2p and sched.device(mb, src % n) != d:
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
    busy = sum(cost[op[0]] for ops in sched.ops for op in ops)
    starts = tuple(tuple(r) for r in starts)
    if sched.name in _versions.STASH:
        ends = [[s + cost[op[0]] for op, s in zip(ops, row, strict=True)]
                for ops, row in zip(sched.ops, starts, strict=True)]
        read = _versions.read(sched, starts, ends)
    else:  # synchronous: every op reads version 0 (cheap for a million ops)
        read = tuple((0,) * len(ops) for ops in sched.ops)
    return Timeline(sched, starts, dict(cost), makespan,
                    1 - busy / (p * makespan), tuple(_peak(ops, split) for ops in sched.ops),
                    read, _versions.staleness(sched, read), _versions.copies(sched, read))


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
        elif op.kind == release or op.kind == "BW":
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
