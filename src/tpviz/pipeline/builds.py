"""The pipeline chapter's build checkers: one tick's sends in ``shard_map`` (7.6), and a
schedule for a stash of two microbatches, built for any p and m and run as one SPMD program
(7.7). Both run on :mod:`tpviz.core.harness`: the learner's code runs with the library's
schedules out of reach, on inputs and sizes the checker chooses."""

from __future__ import annotations

import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import harness
from tpviz.core.exercises import Wrong, as_integer, checker
from tpviz.pipeline import spmd
from tpviz.pipeline.plan import Op, Schedule

# the book's schedules: each constructs an op order, which is what 7.1 and 7.7 ask for
SCHEDULES = ("tpviz.pipeline.plan.schedule", "tpviz.pipeline.orders.naive",
             "tpviz.pipeline.orders.gpipe", "tpviz.pipeline.orders.one_f_one_b",
             "tpviz.pipeline.orders.interleaved", "tpviz.pipeline.orders.zb_h1")
STAGE = ("stage",)


# --- 7.6 one tick's sends ----------------------------------------------------------------------

def _tick_inputs(s: dict, rng) -> tuple:
    shape = (s["devices"] * s["rows"], s["width"])
    return (rng.standard_normal(shape, dtype=np.float32),
            rng.standard_normal(shape, dtype=np.float32))


def _tick_reference(y, dh, case):
    n, fwd, bwd = case.n, case.sizes["forward"], case.sizes["backward"]
    ys, dhs = np.asarray(y).reshape(n, -1, y.shape[1]), np.asarray(dh).reshape(n, -1, y.shape[1])
    got_y, got_dh = np.zeros_like(ys), np.zeros_like(dhs)
    for i in fwd:
        got_y[i + 1] = ys[i]
    for i in bwd:
        got_dh[i - 1] = dhs[i]
    return got_y.reshape(y.shape), got_dh.reshape(dh.shape)


def _tick_program(answer, case):
    import jax

    fwd, bwd = case.sizes["forward"], case.sizes["backward"]
    return jax.shard_map(lambda y, dh: answer(y, dh, fwd, bwd), mesh=case.mesh,
                         in_specs=(P("stage"), P("stage")), out_specs=(P("stage"), P("stage")),
                         check_vma=False)


def _tick_sends(case, found) -> str | None:
    """Only permutes, exactly this tick's (source, target) pairs, one block each."""
    block = case.sizes["rows"] * case.sizes["width"] * 4
    other = [c for c, _ in found if c.kind != "collective-permute"]
    if other:
        return f"{other[0].kind} is not a send between neighbours"
    pairs = sorted(tuple(pair) for c, _ in found for pair in c.groups)
    want = sorted([(i, i + 1) for i in case.sizes["forward"]]
                  + [(i, i - 1) for i in case.sizes["backward"]])
    if pairs != want:
        extra, missing = sorted(set(pairs) - set(want)), sorted(set(want) - set(pairs))
        if any(abs(a - b) != 1 for a, b in extra):
            return (f"a send {next((a, b) for a, b in extra if abs(a - b) != 1)} between "
                    "devices that are not neighbours (a pipeline has no link from the last "
                    "stage to the first)")
        return (f"{len(pairs)} transfers where this tick has {len(want)}"
                + (f": pairs {extra} send although their op did not run" if extra else "")
                + (f": pairs {missing} are missing" if missing and not extra else ""))
    big = [c for c, _ in found if c.bytes != block]
    if big:
        return (f"a permute moves {big[0].bytes:,} bytes; one microbatch's block is "
                f"{block:,}")
    return None


TICK = harness.Build(
    what="your tick", layouts=("Y[R_{stage}, W]", "DH[R_{stage}, W]"),
    out=("Y[R_{stage}, W]", "DH[R_{stage}, W]"), axes=STAGE, program=_tick_program,
    inputs=_tick_inputs, reference=_tick_reference,
    cases=(((4,), {"rows": 2, "width": 3, "forward": (0, 1, 2), "backward": (1, 2, 3)}),
           ((4,), {"rows": 3, "width": 5, "forward": (1,), "backward": (3,)}),
           ((8,), {"rows": 2, "width": 4, "forward": (0, 2, 5, 6), "backward": (7, 3, 1)}),
           ((4,), {"rows": 1, "width": 6, "forward": (0, 2), "backward": (2,)})),
    out_names=("the activations received", "the gradients received"), extra=_tick_sends,
    unavailable=("tpviz.pipeline.spmd.program", "tpviz.pipeline.spmd.Ticks.sends"),
    hint="A pipeline sends only along the pairs of this tick: forward from i to i + 1, backward "
         "from i to i - 1, never from the last device to the first; read the number of devices "
         "from the mesh axis.",
    praise="Each tick sends exactly its schedule's pairs: no idle sends, no wraparound.",
    rtol=0, atol=0)


@checker("One tick's sends")
def check_tick(fn) -> str:
    """``fn(y, dh, forward, backward)`` inside ``shard_map`` over "stage" → what each device
    receives: y from device i - 1 if i - 1 is in ``forward``, dh from i + 1 if i + 1 is in
    ``backward``, zeros otherwise; on 4 and 8 devices, blocks of several shapes, and the
    compiled permutes' exact (source, target) pairs and bytes."""
    return harness.grade(fn, TICK)


# --- 7.7 a schedule for a stash of 2 -----------------------------------------------------------
SLOTS = 2
STASH_CASES = ((4, 8), (3, 6), (5, 7), (2, 5))  # (p, m): properties at each
STASH_RUNS = ((4, 8), (2, 5))  # (p, m): run as one SPMD program against one device


def stash_target(p: int, m: int) -> int:
    """Most lock-step ticks allowed: each microbatch holds one of device 0's two slots from its
    F to its B, at least 2p ticks (there and back through p stages), so no 2-slot schedule
    takes fewer than p·m + 1 ticks; the target leaves 2p ticks of slack: p(m + 2)."""
    return p * (m + 2)


def as_schedule(lists, p: int, m: int, name: str = "yours") -> Schedule:
    """The learner's per-device op lists as a :class:`Schedule`, or :class:`Wrong` naming what
    is malformed: every device runs each microbatch's F once, then its B once."""
    try:
        rows = [[(str(k), as_integer(i, "a microbatch")) for k, i in ops] for ops in lists]
    except (TypeError, ValueError, Wrong):
        raise Wrong("return one list per device of ('F', i) and ('B', i) pairs.") from None
    if len(rows) != p:
        raise Wrong(f"you returned {len(rows)} device lists for p = {p} devices.")
    for d, ops in enumerate(rows):
        for i in range(m):
            kinds = [k for k, j in ops if j == i]
            if sorted(kinds) != ["B", "F"]:
                raise Wrong(f"device {d} runs microbatch {i} as {kinds or 'nothing'}; every "
                            "device runs each microbatch's F once and its B once.")
            if kinds[0] != "F":
                raise Wrong(f"device {d} runs the B of microbatch {i} before its F.")
        if len(ops) != 2 * m:
            odd = sorted({j for _, j in ops} - set(range(m)))
            raise Wrong(f"device {d} has {len(ops)} ops for m = {m} microbatches"
                        + (f" (microbatches {odd} do not exist)" if odd else "") + ".")
    return Schedule(name, p, m, 1, tuple(tuple(Op(k, i, d) for k, i in ops)
                                         for d, ops in enumerate(rows)))


def _stash_properties(fn, p: int, m: int) -> tuple[Schedule, int]:
    """The schedule ``fn(p, m)`` and its lock-step ticks, or :class:`Wrong`: well formed,
    runnable (no deadlock), at most 2 microbatches held per device, within the tick target."""
    from tpviz.errors import ScheduleError
    from tpviz.pipeline.simulate import simulate

    lists = harness.guarded(fn, p, m, what=f"small_stash({p}, {m})", names=SCHEDULES)
    sched = as_schedule(lists, p, m)
    try:
        ticks = spmd.ticks(sched)
    except ScheduleError as e:
        reason = str(e).split(" Use naive")[0].replace("'yours' cannot run as one SPMD program: ",
                                                       "")
        raise Wrong(f"the devices cannot run it in lock step: {reason}",
                    "Each device must run its ops in an order its neighbours can feed, and use "
                    "the messages it is sent in the order they arrive.") from None
    peaks = simulate(sched).peak_activations
    if max(peaks) > SLOTS:
        d = peaks.index(max(peaks))
        raise Wrong(f"it runs, but device {d} holds {max(peaks)} microbatches at once (a stash "
                    f"of {max(peaks)} slots, not {SLOTS}).",
                    "A device may start a forward only while it holds fewer than 2 "
                    "microbatches.")
    target = stash_target(p, m)
    if ticks.count > target:
        naive = all([k for k, _ in ops] == ["F", "B"] * m for ops in lists)
        what = ("that is the naive schedule (F, B, F, B: one microbatch at a time): "
                if naive else "")
        raise Wrong(f"it holds at most 2 microbatches, but {what}it takes {ticks.count} ticks "
                    f"in lock step, more than the target p(m + 2) = {target}; with 2 slots a "
                    f"schedule can come within a few ticks of p·m = {p * m} (device 0's two "
                    "slots each turn over every 2p ticks).",
                    "Look at the ticks where a device idles although a slot is free, or a "
                    "gradient has arrived.")
    return sched, ticks.count


@checker("A pipeline schedule in 2 stash slots")
def check_small_stash(fn) -> str:
    """``fn(p, m)`` → every device's ops (lists of ``("F", i)``, ``("B", i)``) holding at most
    2 microbatches per device and taking at most p(m + 2) lock-step ticks, at several (p, m)
    with the library's schedules out of reach; two of them run as one SPMD program on p devices
    against one device, with the compiled sends and stash read."""
    from tpviz.errors import CheckFailed
    from tpviz.pipeline.check import spmd_check

    done, runs = [], []
    for p, m in STASH_CASES:
        try:
            sched, count = _stash_properties(fn, p, m)
            if (p, m) in STASH_RUNS:
                try:
                    r = spmd_check(sched, width=8, rows=4)
                except CheckFailed as e:
                    raise Wrong(f"the compiled program does not match the schedule: {e}") \
                        from None
                runs.append(r)
        except Wrong as w:
            if done:
                raise Wrong(f"right for {', '.join(done)}, but for p = {p}, m = {m}: "
                            f"{w.message}", w.hint or "Does your code assume a number of "
                            "devices or microbatches? Read them from p and m.") from None
            raise Wrong(f"for p = {p}, m = {m}: {w.message}", w.hint) from None
        done.append(f"p = {p}, m = {m} ({count} ticks)")
    r = runs[0]
    transfers, moved = r.transfers()
    return (f"on {r.stages} devices (m = {r.microbatches}): loss and gradients equal one "
            f"device's; {transfers} transfers ({moved:,} bytes) in collective-permutes; a "
            f"stash of {r.stash_slots} slots ({r.memory.temp:,} bytes of temporaries per "
            f"device), {r.ticks} ticks against 1F1B's 22. Right for {'; '.join(done)}.")
