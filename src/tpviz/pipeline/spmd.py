"""A pipelined MLP as ONE compiled SPMD program: ``jax.jit(jax.shard_map(...))`` over a mesh axis
``"stage"`` of p devices.

Device d holds stage d's weights: one layer ``y = tanh(h W_d + b_d)`` (the model of
:mod:`tpviz.pipeline.run`, one chunk per device). The program is unrolled over the *ticks* of the
schedule: :func:`ticks` plays ``schedule(...)``'s op order in lock step, and at tick t every device
runs its own op (F, B or nothing, chosen by ``jnp.where`` on a table indexed by its
``axis_index``); then one ``ppermute`` sends the forward activations to the next device and one
sends the input gradients back. Each permute lists exactly the (source, target) pairs that send
at that tick, so the compiled program's permutes are the schedule's point-to-point sends.

Saved activations (each F's input h and output y, for its B) live in a stash of K slots per
device, K = the most microbatches any device holds at once under the schedule: m for GPipe, p for
1F1B. Slots are handed out at F and freed at B; which slot a microbatch uses is in the tables.
The loss is ``sum((y - target)^2) / (2 * batch)``, as in :func:`tpviz.pipeline.run.loss_fn`.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.errors import ScheduleError
from tpviz.pipeline.plan import Schedule

AXIS = "stage"
IDLE, FWD, BWD = 0, 1, 2


@dataclass(frozen=True)
class Ticks:
    """The schedule in lock step: ``kind[t][d]``, ``microbatch[t][d]`` and ``slot[t][d]`` say
    what device d does at tick t; ``slots`` is the stash size K every device allocates."""

    kind: tuple[tuple[int, ...], ...]
    microbatch: tuple[tuple[int, ...], ...]
    slot: tuple[tuple[int, ...], ...]
    slots: int

    @property
    def count(self) -> int:
        return len(self.kind)

    def sends(self, t: int, direction: int) -> tuple[tuple[int, int], ...]:
        """(source, target) pairs that send at tick t: forward (+1) after an F of a device
        that is not the last, backward (-1) after a B of a device that is not the first."""
        p = len(self.kind[t])
        kind = FWD if direction > 0 else BWD
        return tuple((d, d + direction) for d in range(p)
                     if self.kind[t][d] == kind and 0 <= d + direction < p)


def ticks(sched: Schedule) -> Ticks:
    """Play the schedule's per-device op order in lock step: at each tick a device runs its next
    op if that op's input arrived at an earlier tick (an F needs the previous stage's F of the
    same microbatch, a B the next stage's B, or the last stage's own F).

    Each device keeps only the last activation and the last gradient it was sent (one buffer
    each), so an op order in which a second message arrives before the first is used (the
    interleaved order with one chunk sends ahead like that) is refused, not run wrong.

    Raises:
        ScheduleError: a schedule with chunks > 1 or split W ops (use ``run.run`` for those),
            an op order whose messages would overwrite one another, or one that deadlocks.
    """
    if sched.chunks != 1 or sched.has_weight_ops:
        raise ScheduleError(f"the SPMD pipeline runs one chunk per device and unsplit backwards "
                            f"(naive, gpipe, 1f1b); {sched.name!r} needs run.run.")
    p = sched.stages
    done: dict[tuple[str, int, int], int] = {}  # (kind, microbatch, stage) -> tick it ran
    pos, free, held = [0] * p, [[] for _ in range(p)], [{} for _ in range(p)]
    used = [0] * p
    last_sent = {}  # (kind, device) -> microbatch of the last message the device was sent
    kinds, mbs, slots = [], [], []
    t = 0
    while any(pos[d] < len(sched.ops[d]) for d in range(p)):
        row_k, row_m, row_s = [IDLE] * p, [0] * p, [0] * p
        for d in range(p):
            if pos[d] == len(sched.ops[d]):
                continue
            kind, mb, s = sched.ops[d][pos[d]]
            need = (("F", mb, s - 1) if s else None) if kind == "F" else (
                ("B", mb, s + 1) if s < p - 1 else ("F", mb, s))
            if need is not None and done.get(need, t) >= t:
                continue
            if need is not None and need[2] != s and last_sent.get((kind, d)) != mb:
                raise ScheduleError(
                    f"{sched.name!r} cannot run as one SPMD program: device {d}'s {kind} of "
                    f"microbatch {mb} finds microbatch {last_sent.get((kind, d))}'s message in "
                    "its one-message buffer (the order sends ahead). Use naive, gpipe or 1f1b "
                    "here, and tpviz.pipeline.run.run for the other schedules.")
            if kind == "F":
                slot = free[d].pop() if free[d] else used[d]
                used[d] = max(used[d], slot + 1)
                held[d][mb] = slot
            else:
                slot = held[d].pop(mb)
                free[d].append(slot)
            row_k[d], row_m[d], row_s[d] = (FWD if kind == "F" else BWD), mb, slot
        for d in range(p):
            if row_k[d] != IDLE:
                done["F" if row_k[d] == FWD else "B", row_m[d], d] = t
                pos[d] += 1
                if row_k[d] == FWD and d < p - 1:
                    last_sent["F", d + 1] = row_m[d]
                elif row_k[d] == BWD and d > 0:
                    last_sent["B", d - 1] = row_m[d]
        if all(k == IDLE for k in row_k):
            raise ScheduleError(f"the schedule deadlocks in lock step at tick {t}.")
        kinds.append(tuple(row_k))
        mbs.append(tuple(row_m))
        slots.append(tuple(row_s))
        t += 1
    return Ticks(tuple(kinds), tuple(mbs), tuple(slots), max(used))


def program(sched: Schedule, mesh, slots: int | None = None):
    """The compiled-to-be training step ``(w, b, xs, targets) -> (loss, dw, db)``.

    ``w: f32[p, H, H]`` and ``b: f32[p, H]`` are split over ``"stage"`` (device d gets stage d);
    ``xs, targets: f32[m, rows, H]`` (the microbatches) are on every device; device 0 reads xs,
    device p - 1 reads targets. ``loss: f32[p]`` holds the loss on the last device (0 elsewhere);
    ``dw``, ``db`` are the gradients, split like w and b. ``slots`` (default: the schedule's
    need, K) makes the stash larger, to measure what its size costs.
    """
    tk = ticks(sched)
    if slots is not None and slots < tk.slots:
        raise ScheduleError(f"{sched.name} needs {tk.slots} stash slots per device, got {slots}.")
    k_slots = tk.slots if slots is None else slots
    p, m = sched.stages, sched.microbatches
    kind_t, mb_t, slot_t = (jnp.asarray(np.array(a, np.int32)) for a in
                            (tk.kind, tk.microbatch, tk.slot))

    def per_device(w, b, xs, targets):
        # w: f32[1, H, H]  b: f32[1, H]  xs, targets: f32[m, rows, H]
        w, b = w[0], b[0]
        d = jax.lax.axis_index(AXIS)
        first, last = d == 0, d == p - 1
        rows, width = xs.shape[1], xs.shape[2]
        batch = m * rows
        stash = jnp.zeros((k_slots, 2, rows, width), xs.dtype)  # (h, y) of held microbatches
        dw, db = jnp.zeros_like(w), jnp.zeros_like(b)
        loss = jnp.zeros((), xs.dtype)
        fwd_in = bwd_in = jnp.zeros((rows, width), xs.dtype)  # what the neighbours sent
        for t in range(tk.count):
            kind, mb, slot = kind_t[t, d], mb_t[t, d], slot_t[t, d]
            is_f, is_b = kind == FWD, kind == BWD
            # B reads its microbatch's saved (h, y) from its slot
            h_s, y_s = stash[slot, 0], stash[slot, 1]
            error = y_s - targets[mb]
            dy = jnp.where(last, error / batch, bwd_in)
            dz = dy * (1 - y_s * y_s)  # dz: f32[rows, H]
            dw = dw + jnp.where(is_b, h_s.T @ dz, 0.0)
            db = db + jnp.where(is_b, dz.sum(axis=0), 0.0)
            loss = loss + jnp.where(is_b & last, jnp.sum(error * error) / (2 * batch), 0.0)
            dh = dz @ w.T  # dh: f32[rows, H], the gradient sent to the previous stage
            # F: h -> y = tanh(h W + b), saved in a free slot until its B
            h = jnp.where(first, xs[mb], fwd_in)
            y = jnp.tanh(h @ w + b)  # y: f32[rows, H]
            keep = jnp.where(is_f, jnp.stack([h, y]), jnp.where(is_b, 0.0, jnp.stack([h_s, y_s])))
            stash = jax.lax.dynamic_update_index_in_dim(stash, keep, slot, 0)
            # a device that receives nothing at this tick keeps what it was sent before
            if pairs := tk.sends(t, +1):
                got = jnp.isin(d, jnp.array([dst for _, dst in pairs]))
                fwd_in = jnp.where(got, jax.lax.ppermute(y, AXIS, pairs), fwd_in)
            if pairs := tk.sends(t, -1):
                got = jnp.isin(d, jnp.array([dst for _, dst in pairs]))
                bwd_in = jnp.where(got, jax.lax.ppermute(dh, AXIS, pairs), bwd_in)
        return loss[None], dw[None], db[None]

    return jax.jit(jax.shard_map(per_device, mesh=mesh,
                                 in_specs=(P(AXIS), P(AXIS), P(), P()),
                                 out_specs=(P(AXIS), P(AXIS), P(AXIS)), check_vma=False))
