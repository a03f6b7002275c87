"""A dependency-driven simulator: an op starts when its device is free and its inputs are ready.

``F`` of chunk s needs ``F`` of chunk s - 1 (same microbatch); ``B`` of chunk s needs ``B`` of
chunk s + 1 (or the last chunk's ``F``); ``W`` needs the ``B`` of its own chunk; ``BW`` (a full
backward in a schedule that also splits some, DualPipe's) needs what ``B`` needs. An F that opens
an overlapped F&B pair (``Schedule.paired``, DualPipe) also waits for its backward's input. Sending
between devices adds ``p2p`` time. The timeline also says which weight version every op read
(:mod:`tpviz.pipeline.versions`): the staleness and weight copies of each device.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from operator import itemgetter

from tpviz.core import validate
from tpviz.core.kinds import Index, Items, Positive, Time
from tpviz.errors import ScheduleError
from tpviz.pipeline import versions as _versions
from tpviz.pipeline.ops import Op, Schedule, no_gc
from tpviz.pipeline.plan import MAX_OPS
from tpviz.pipeline.plan import schedule as _schedule


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
    stage_costs: tuple[float, ...] = ()  # per device: its ops take durations x this (() = 1)

    @property
    def steady_bubble(self) -> float:
        """The bubble per step once steps run back to back without a flush: see
        :func:`steady_state` (the same op times, 8 steps)."""
        return steady_state(self.schedule, durations=self.durations).bubble_fraction

    def work(self, device: Index) -> float:
        """Compute time of one device (the sum of its ops)."""
        return sum(e - s for _, s, e in self.spans(device))

    def spans(self, device: Index) -> list[tuple[Op, float, float]]:
        """(op, start, end) of every op of one device, in order."""
        validate.integer("device", device, minimum=0, maximum=self.schedule.stages - 1,
                         fix=f"This schedule's devices are 0 to {self.schedule.stages - 1}.")
        ops, k = self.schedule.ops[device], self.stage_costs[device] if self.stage_costs else 1
        return [(op, s, s + k * self.durations[op.kind])
                for op, s in zip(ops, self.starts[device], strict=True)]


def simulate(sched: Schedule, t_f: Positive | None = None, t_b: Positive | None = None,
             t_w: Positive | None = None, *, p2p: Time = 0.0, forward: Positive | None = None,
             backward: Positive | None = None, stage_costs: Items | None = None) -> Timeline:
    """Run the schedule on ideal devices.

    Args:
        t_f: time of one forward through a *full* stage (default 1); a chunk of a schedule
            with v chunks per device takes ``1/v`` of it. ``forward=`` is the same argument.
        t_b: without ``t_w``: the whole backward (default 2; ``backward=`` is the same), split
            in halves where a schedule separates B and W. With ``t_w``: the input-gradient
            part B alone.
        t_w: the weight-gradient part W (Qi et al.'s T_W); an unsplit backward takes t_b + t_w.
        p2p: time to send an activation or a gradient to another device.
        stage_costs: per device, a factor on the time of its ops (an unbalanced split: stage
            costs 6, 3, 3, 4); the default, all 1.

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
    costs = _costs(sched, forward, backward, t_w)
    scale = None if stage_costs is None else _stage_costs(stage_costs, sched.stages)
    with no_gc():
        return _simulate(sched, costs, p2p, scale=scale)


def _stage_costs(costs, stages: int) -> tuple[float, ...]:
    if isinstance(costs, str) or not hasattr(costs, "__len__") or len(costs) != stages:
        raise ScheduleError(f"stage_costs must hold one cost per device ({stages}), such as "
                            f"{[1] * stages}; got {costs!r}.")
    return tuple(validate.number(f"stage_costs[{d}]", c, positive=True)
                 for d, c in enumerate(costs))


def _costs(sched: Schedule, forward: float, backward: float, t_w) -> dict[str, float]:
    """The time of one F, B, W and BW op of ``sched`` (see :func:`simulate`'s arguments)."""
    if t_w is None:
        half = backward / (2 if sched.has_weight_ops else 1)
        costs = {"F": forward, "B": half, "W": backward / 2, "BW": backward}
    else:
        t_w = validate.number("t_w", t_w, positive=True)
        costs = {"F": forward, "B": backward if sched.has_weight_ops else backward + t_w,
                 "W": t_w, "BW": backward + t_w}
    return {k: c / sched.chunks for k, c in costs.items()}


@dataclass(frozen=True)
class SteadyState:
    """Steps run back to back with no flush between them (see :func:`steady_state`)."""

    schedule: Schedule  # one step's schedule
    steps: int  # steps simulated
    period: float  # time per step once the pipeline is in its steady state
    work: float  # compute time of one step, summed over devices
    bubble_fraction: float  # 1 - work / (p * period)
    timeline: Timeline  # all steps: microbatch j m + i is microbatch i of step j


def steady_state(sched: Schedule, t_f: Positive = 1.0, t_b: Positive = 2.0,
                 t_w: Positive | None = None, *, steps: int = 8, p2p: Time = 0.0,
                 durations: dict[str, float] | None = None) -> SteadyState:
    """The bubble per step when consecutive steps overlap: no global synchronization between
    them (Qi et al.'s optimizer *post-validation*), so a device starts its ops of step j + 1
    as soon as it has finished its ops of step j (its own weight update is local) and their
    inputs have arrived. Each device runs its op list ``steps`` times in a row; asynchronous
    schedules (which never flush) run one stream of ``steps * m`` microbatches instead.

    The period is measured between the ends of step 1 and step ``steps - 2`` (the first and
    the last steps fill and drain the pipeline): ``(E[steps-2] - E[1]) / (steps - 3)``, where
    ``E[j]`` is the time the last op of step j ends. Arguments as for :func:`simulate`
    (``durations``: the per-op times of a :class:`Timeline` instead of t_f, t_b, t_w).

    A schedule gains nothing when its first device's first op and last op of a step lie on one
    chain of dependencies through every device (1F1B, ZB-H1: device 0 starts with F of
    microbatch 0 and ends with the backward of the last one, which needs every device): the
    next step cannot start earlier, so its bubble stays the flushed one.
    """
    validate.instance("schedule", sched, Schedule, "a Schedule",
                      "Make one with tpviz.pipeline.schedule('zb-h2', stages, microbatches).")
    steps = validate.integer("steps", steps, minimum=4, error=ScheduleError)
    p2p = validate.number("p2p", p2p, minimum=0.0)
    validate.bounded("steps × ops of one step", steps * sum(map(len, sched.ops)), MAX_OPS,
                     "Simulate fewer steps (the period settles after a few).", ScheduleError)
    if durations is None:
        durations = _costs(sched, validate.number("t_f", t_f, positive=True),
                           validate.number("t_b", t_b, positive=True), t_w)
    else:
        durations = validate.keyed("durations", durations, ("F", "B", "W", "BW"))
    m = sched.microbatches
    if sched.name in _versions.STASH:  # a stream, no flush at all
        ops = _schedule(sched.name, sched.stages, steps * m).ops
    else:
        ops = tuple(tuple(Op(k, j * m + i, c) for j in range(steps) for k, i, c in row)
                    for row in sched.ops)
    pairs = tuple(frozenset(j * len(row) + i for j in range(steps) for i in row_pairs)
                  for row, row_pairs in zip(sched.ops, sched.paired, strict=True)
                  ) if sched.paired else ()
    many = Schedule(sched.name, sched.stages, m, sched.chunks, ops, sched.placement, pairs)
    with no_gc():
        t = _simulate(many, durations, p2p, steps)
    end = [0.0] * steps
    for row, starts in zip(ops, t.starts, strict=True):
        for op, start in zip(row, starts, strict=True):
            j = op.microbatch // m
            end[j] = max(end[j], start + durations[op.kind])
    period = (end[steps - 2] - end[1]) / (steps - 3)
    work = sum(durations[op.kind] for row in sched.ops for op in row)
    return SteadyState(sched, steps, period, work, 1 - work / (sched.stages * period), t)


def _simulate(sched: Schedule, cost: dict[str, float], p2p: float, steps: int = 1,
              scale: tuple[float, ...] | None = None) -> Timeline:
    p, v = sched.stages, sched.chunks
    n = p * v  # chunks in the model
    last, m, device = n - 1, sched.microbatches, sched.device
    cost_f, cost_b, cost_w, cost_bw = cost["F"], cost["B"], cost["W"], cost["BW"]
    pairs = sched.paired
    # finish times of F and of B (or BW), flat: index microbatch * n + chunk; -1 = not run yet
    size = m * n * steps  # steps > 1: microbatch j m + i is step j's i
    fin_f, fin_b = [-1.0] * size, [-1.0] * size
    wait_f: dict[int, list[int]] = {}  # index -> devices waiting for that F (or B) to finish
    wait_b: dict[int, list[int]] = {}
    free = [0.0] * p
    rest = [iter(row) for row in sched.ops]  # each device's ops not yet started
    held: list[Op | None] = [None] * p  # the op a device is waiting to start
    starts: list[list[float]] = [[] for _ in range(p)]
    queue = deque(range(p))

    def backward_input(mb: int, st: int, d: int) -> float:
        """When a backward's input (next chunk's B or last chunk's F) is on d; -1: d waits."""
        here = mb * n + st
        src, dep, wait = (here + 1, fin_b, wait_b) if st < last else (here, fin_f, wait_f)
        ready = dep[src]
        if ready < 0.0:
            wait.setdefault(src, []).append(d)
        elif p2p and device(mb % m, src % n) != d:
            ready += p2p
        return ready

    while queue:
        d = queue.popleft()
        t, row, op = free[d], starts[d], held[d]
        append, k = row.append, scale[d] if scale else 1.0
        for op in rest[d] if op is None else chain((op,), rest[d]):  # noqa: B020
            kind, mb, st = op
            here = mb * n + st
            if kind == "F":
                out, woken, c = fin_f, wait_f, cost_f * k
                if st:
                    ready = fin_f[here - 1]
                    if ready < 0.0:
                        wait_f.setdefault(here - 1, []).append(d)
                        held[d] = op
                        break
                    if p2p and device(mb % m, st - 1) != d:
                        ready += p2p
                    start = ready if ready > t else t
                else:
                    start = t
            elif kind == "W":  # after its own B, on this device: never sent
                if fin_b[here] < 0.0:
                    wait_b.setdefault(here, []).append(d)
                    held[d] = op
                    break
                append(t)
                t += cost_w * k
                continue
            else:  # B or BW
                out, woken, c = fin_b, wait_b, (cost_b if kind == "B" else cost_bw) * k
                ready = backward_input(mb, st, d)
                if ready < 0.0:
                    held[d] = op
                    break
                start = ready if ready > t else t
            if pairs and len(row) in pairs[d]:  # F&B: the backward's input must be there too
                _, mb2, st2 = sched.ops[d][len(row) + 1]
                ready = backward_input(mb2, st2, d)
                if ready < 0.0:
                    held[d] = op
                    break
                if ready > start:
                    start = ready
            append(start)
            out[here] = t = start + c
            if woken:
                sleepers = woken.pop(here, None)
                if sleepers:
                    queue.extend(sleepers)
        else:
            held[d] = None
        free[d] = t
    stuck = [d for d in range(p) if held[d] is not None]
    if stuck:
        op = held[stuck[0]]
        raise ScheduleError(f"the schedule deadlocks: device {stuck[0]} waits forever at {op}.")
    makespan = max(free)
    busy = sum((scale[d] if scale else 1.0) * sum(map(cost.__getitem__, map(itemgetter(0), ops)))
               for d, ops in enumerate(sched.ops))
    starts = tuple(tuple(r) for r in starts)
    if steps > 1:  # steady_state: the times are what it needs
        return Timeline(sched, starts, dict(cost), makespan, 1 - busy / (p * makespan), ())
    if sched.name in _versions.STASH:
        ends = [[s + (scale[d] if scale else 1.0) * cost[op[0]]
                 for op, s in zip(ops, row, strict=True)]
                for d, (ops, row) in enumerate(zip(sched.ops, starts, strict=True))]
        read = _versions.read(sched, starts, ends)
    else:  # synchronous: every op reads version 0 (cheap for a million ops)
        read = tuple((0,) * len(ops) for ops in sched.ops)
    split = sched.has_weight_ops
    return Timeline(sched, starts, dict(cost), makespan,
                    1 - busy / (p * makespan), tuple(_peak(ops, split) for ops in sched.ops),
                    read, _versions.staleness(sched, read), _versions.copies(sched, read),
                    scale or ())


def releasing_kind(split: bool) -> str:
    """The op after which a microbatch's saved activations are freed: its B, or its W when the
    weight gradient is split off (W needs the layer's input)."""
    return "W" if split else "B"


def _peak(ops, split: bool) -> int:
    """Most microbatches whose activations a device holds: +1 at F, -1 at the releasing op."""
    step = {"F": 1, releasing_kind(split): -1, "BW": -1}
    return max(0, max(accumulate(map(step.get, map(itemgetter(0), ops), repeat(0))), default=0))
