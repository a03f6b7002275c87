"""Weight versions: which version of its stage's weights every op reads, read off a timeline.

A *version* counts the updates a stage's weights have had. Synchronous schedules update once,
after the flush: every op of the step reads version 0. The asynchronous ones never flush; a
stage updates as gradients arrive:

- ``pipedream`` (Narayanan et al. 2019): an update after every backward of the stage; a forward
  reads the newest version, and its backward the same one (*weight stashing*: the version is
  kept until the backward has run);
- ``2bw`` (Narayanan et al. 2021): one update per batch of A = p microbatches (gradients
  accumulated); batch k reads version max(k-1, 0), so W(t+1) = W(t) - η ∇f(W(t-1));
- ``pipemare`` (Yang et al. 2021) and ``ampnet`` (Gaunt et al. 2017): updates as for PipeDream,
  but no stash: the backward reads the newest weights, not the forward's.

The *staleness* of a microbatch's gradient on a stage is the number of updates the stage made
between the version its forward read and the update that applies that gradient. *Weight copies*
are the most versions a device keeps at once (its current one and the stashed ones) times the
stages it holds, in units of one p-th of the model.
"""

from __future__ import annotations

from bisect import bisect_right

from tpviz.errors import ScheduleError

STASH = {"pipedream": "stash", "2bw": "stash", "pipemare": "newest", "ampnet": "newest"}


def accumulation(name: str, stages: int) -> int:
    """Microbatches per update: p for 2BW (the fewest the paper allows), 1 otherwise."""
    return stages if name == "2bw" else 1


def read(sched, starts, ends) -> tuple[tuple[int, ...], ...]:
    """``versions[d][i]``: the weight version op ``sched.ops[d][i]`` reads (0 for synchronous
    schedules). ``starts``/``ends`` are the ops' simulated times."""
    if sched.name not in STASH:
        return tuple((0,) * len(ops) for ops in sched.ops)
    a = accumulation(sched.name, sched.stages)
    out = []
    for d, ops in enumerate(sched.ops):
        # updates of this stage: at the end of the backward of every a-th microbatch
        done = sorted(e for op, e in zip(ops, ends[d], strict=True)
                      if op.kind == "B" and op.microbatch % a == a - 1)
        fwd: dict[int, int] = {}
        row = []
        for op, start in zip(ops, starts[d], strict=True):
            newest = bisect_right(done, start)
            if op.kind == "F":
                if sched.name == "2bw":
                    version = max(op.microbatch // a - 1, 0)
                    if version > newest:
                        raise ScheduleError(f"2BW: microbatch {op.microbatch} needs version "
                                            f"{version} on device {d} before it exists.")
                else:
                    version = newest
                fwd[op.microbatch] = version
            else:
                version = fwd[op.microbatch] if STASH[sched.name] == "stash" else newest
            row.append(version)
        out.append(tuple(row))
    return tuple(out)


def staleness(sched, versions) -> tuple[int, ...]:
    """Per device: the most updates between a forward's version and the update its gradient
    joins (``microbatch // a`` updates came before it)."""
    if sched.name not in STASH:
        return (0,) * sched.stages
    a = accumulation(sched.name, sched.stages)
    return tuple(max((op.microbatch // a - v for op, v in zip(ops, row, strict=True)
                      if op.kind == "F"), default=0)
                 for ops, row in zip(sched.ops, versions, strict=True))


def copies(sched, versions) -> tuple[float, ...]:
    """Per device: the most weight versions kept at once x the stages held (one p-th of the
    model each): a stashing schedule keeps the newest version and those of microbatches
    between their forward and backward."""
    if sched.name not in STASH and sched.placement == "loop":
        return (1.0,) * sched.stages  # v chunks of a p v-chunk model: one p-th
    out = []
    for ops, row in zip(sched.ops, versions, strict=True):
        stages_held = len({op.chunk for op in ops}) / sched.chunks
        if sched.name not in STASH or STASH[sched.name] != "stash":
            out.append(stages_held)
            continue
        a = accumulation(sched.name, sched.stages)
        live: dict[int, int] = {}  # microbatch -> version stashed
        newest = peak = 0
        for op, v in zip(ops, row, strict=True):
            if op.kind == "F":
                live[op.microbatch] = v
            peak = max(peak, len(set(live.values()) | {newest}))
            if op.kind == "B":
                del live[op.microbatch]
                if op.microbatch % a == a - 1:
                    newest += 1
        out.append(peak * stages_held)
    return tuple(out)
