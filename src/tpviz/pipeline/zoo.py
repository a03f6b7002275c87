"""The rest of the schedule zoo (chapter 8): bidirectional, V-shaped and asynchronous schedules.

Synchronous (one weight version per step, flushed):

- ``chimera`` (Li & Hoefler 2021): two 1F1B pipelines in opposite directions, microbatches
  ``0 … m/2-1`` go down (chunk s on device s), ``m/2 … m-1`` go up (chunk s on device p-1-s);
  every device holds two stages, so twice the parameters. For m > p the basic units of p
  microbatches are directly concatenated (the paper's scheme for N > D).
- ``zb-h2`` and ``zb-v`` (Qi et al. 2024): B (input gradient) and W (weight gradient) split.
  ZB-H2 warms up with ``2(p-d)-1`` forwards on device d (its ``(2p-1) M_B``) and keeps d W's
  for the drain. ZB-V gives each device chunks d and 2p-1-d (a "V") and holds at most ``2p``
  chunk-microbatches (the 1F1B peak); its op order is built in :mod:`tpviz.pipeline.zbv`
  (warm-up, rounds of one B and one F with W's only filling waits, the W stock last). Both
  reach the paper's zero bubble once steps overlap (its optimizer post-validation,
  :func:`tpviz.pipeline.simulate.steady_state`); one flushed step keeps the p-1 skew.
- ``dualpipe`` and ``dualpipev`` (DeepSeek-AI 2024): the op order of ``deepseek-ai/DualPipe``'s
  ``step`` (steps 1-8). Its overlapped F&B chunks (``Schedule.paired``) are one op: it starts
  when the inputs of both its F and its backward are there and lasts F + B (ideal devices
  overlap no compute; DualPipe's overlap hides communication). A full backward (B and W
  together) is the op kind ``"BW"``.

Asynchronous (no flush; a stream of m microbatches, each one an update, 2BW one per p): the op
order of 1F1B; what differs is which weight version each op reads
(:mod:`tpviz.pipeline.versions`).
"""

from __future__ import annotations

from collections import deque

from tpviz.errors import ScheduleError
from tpviz.pipeline.ops import Op
from tpviz.pipeline.orders import one_f_one_b
from tpviz.pipeline.zbv import min_microbatches, zbv

SYNC = ("chimera", "zb-h2", "zb-v", "dualpipe", "dualpipev")
ASYNC = ("pipedream", "2bw", "pipemare", "ampnet")
#: how each schedule places chunk c of microbatch i on a device (see ``Schedule.device``)
PLACEMENT = {"chimera": "bidirectional", "dualpipe": "bidirectional", "zb-v": "v",
             "dualpipev": "v"}
CHUNKS = {"zb-v": 2, "dualpipev": 2}  # model chunks per device


def needs(name: str, p: int, m: int) -> None:
    """Raise a ScheduleError when (p, m) do not suit the schedule."""
    if name in ("chimera", "dualpipe") and p % 2:
        raise ScheduleError(f"{name} pairs device d with device p-1-d, so stages must be even; "
                            f"got {p}. Try {p + 1}.")
    if name == "chimera" and p > 32:
        raise ScheduleError(f"chimera is built here for at most 32 stages (its op order is "
                            f"found by a lock-step search that grows as p^2 m); got {p}.")
    if name == "chimera" and m % p:
        raise ScheduleError(f"chimera repeats a unit of p = {p} microbatches (p/2 each way), so "
                            f"microbatches must be a multiple of {p}; got {m}. Try "
                            f"{(m // p + 1) * p}.")
    if name == "dualpipe" and (m % 2 or m < 2 * p):
        raise ScheduleError(f"dualpipe needs an even number of microbatches, at least 2p = "
                            f"{2 * p}; got {m} (deepseek-ai/DualPipe's own condition).")
    if name == "zb-v" and m < min_microbatches(p):
        raise ScheduleError(f"zb-v needs at least 2p-1 = {min_microbatches(p)} microbatches for "
                            f"p = {p} (device 0 warms up with 2p-1 forwards of its first chunk); "
                            f"got {m}. Use m >= {min_microbatches(p)} or fewer stages.")
    if name == "dualpipev" and m < 2 * p:
        raise ScheduleError(f"dualpipev needs at least 2p = {2 * p} microbatches; got {m} "
                            "(deepseek-ai/DualPipe's own condition).")


def build(name: str, p: int, m: int, backward_ticks: int = 1) -> list[list[Op]]:
    """Every device's ops for schedule ``name`` (checked by :func:`needs` first);
    ``backward_ticks``: Chimera's order built for a backward that many forwards long."""
    needs(name, p, m)
    if name in ASYNC:
        return one_f_one_b(p, m)
    if name == "chimera":
        return _chimera(p, m, backward_ticks)
    if name == "zb-h2":
        return _zb_h2(p, m)
    if name == "zb-v":
        return zbv(p, m)
    return _dualpipe(p, m, v_shape=name == "dualpipev")


def _chimera(p: int, m: int, backward_ticks: int = 1) -> list[list[Op]]:
    """Chimera with Li & Hoefler's direct concatenation: microbatches ``0 … m/2-1`` go down,
    ``m/2 … m-1`` up, and the basic units (p/2 each way) follow each other with the next
    unit's forwards filling the previous unit's tail. In lock step (a forward one tick, a
    backward ``backward_ticks``; the paper's order is 1), a free device runs a ready B first
    (the lowest chunk first), else a ready F (the chunk furthest along first, then the
    earliest microbatch of its direction)."""
    half, never = m // 2, 1 << 62
    chunks = [(d, p - 1 - d) for d in range(p)]  # (downward chunk, upward chunk) per device
    end_f = [[never] * p for _ in range(m)]  # end_f[i][c]: tick F of (i, c) has ended
    end_b = [[never] * p for _ in range(m)]
    next_f = [[0, half] for _ in range(p)]  # next microbatch of each direction
    waiting_b: list[list[tuple[int, int]]] = [[] for _ in range(p)]  # B's whose F has run
    out: list[list[Op]] = [[] for _ in range(p)]
    free, left, t = [0] * p, 2 * m * p, 0
    while left:
        for d in range(p):
            if free[d] > t:
                continue
            best = None  # (key, kind, microbatch, chunk)
            for i, c in waiting_b[d]:
                if (end_b[i][c + 1] if c < p - 1 else end_f[i][c]) <= t:
                    key = (c, i % half)
                    if best is None or key < best[0]:
                        best = (key, "B", i, c)
            if best is None:
                for k, c in enumerate(chunks[d]):
                    i = next_f[d][k]
                    if i < (half, m)[k] and (c == 0 or end_f[i][c - 1] <= t):
                        key = (-c, i % half)
                        if best is None or key < best[0]:
                            best = (key, "F", i, c)
            if best is None:
                continue
            _, kind, i, c = best
            out[d].append(Op(kind, i, c))
            left -= 1
            if kind == "F":
                free[d] = end_f[i][c] = t + 1
                next_f[d][c != chunks[d][0]] += 1
                waiting_b[d].append((i, c))
            else:
                free[d] = end_b[i][c] = t + backward_ticks
                waiting_b[d].remove((i, c))
        t += 1
    return out


def _needs(op: Op, n: int) -> Op | None:
    """The op whose output ``op`` reads (chunks 0 … n-1 in model order)."""
    if op.kind == "F":
        return Op("F", op.microbatch, op.chunk - 1) if op.chunk else None
    return Op("B", op.microbatch, op.chunk + 1) if op.chunk < n - 1 else Op(
        "F", op.microbatch, op.chunk)


def _zb_h2(p: int, m: int) -> list[list[Op]]:
    """Qi et al.'s parallelogram: device d warms up with 2(p-d)-1 forwards (their (2p-1) M_B
    on device 0), then B, W, F in turn, keeping 2d W's back for the tail. Device d then runs
    from d t_F to d t_F + m (t_F + t_B + t_W) without a gap once steps overlap (t_F = t_B = t_W):
    the next step's warm-up fills the skew (:func:`tpviz.pipeline.simulate.steady_state`)."""
    out = []
    for d in range(p):
        warm = min(2 * (p - d) - 1, m)
        ops, pending = [Op("F", i, d) for i in range(warm)], []
        for j in range(m):
            ops.append(Op("B", j, d))
            pending.append(Op("W", j, d))
            if len(pending) > 2 * d:
                ops.append(pending.pop(0))
            if warm + j < m:
                ops.append(Op("F", warm + j, d))
        out.append(ops + pending)
    return out


def _dualpipe(p: int, m: int, v_shape: bool) -> list[list[Op]]:
    """deepseek-ai/DualPipe's ``step``: per device, steps 1-8 over two phases. DualPipe: phase 0
    of the first half of the devices is the downward microbatches (0 … m/2-1) at chunk d, phase 1
    the upward ones at chunk p-1-d (swapped on the second half). DualPipeV: phase 0 is chunk d,
    phase 1 chunk 2p-1-d, all m microbatches."""
    out = []
    for rank in range(p):
        if v_shape:
            ranks, h, count = p, rank, m
            phases = [(0, rank), (0, 2 * p - 1 - rank)]  # (first microbatch, chunk)
        else:
            ranks, h, count = p // 2, min(rank, p - 1 - rank), m // 2
            down, up = (0, rank), (m // 2, p - 1 - rank)
            phases = [down, up] if rank < p // 2 else [up, down]
        out.append(_dualpipe_rank(rank, ranks, h, count, phases))
    return out


def paired(name: str, ops) -> tuple[frozenset[int], ...]:
    """DualPipe's overlapped chunks: per device, the indices i where ``ops[d][i]`` (an F) and
    ``ops[d][i + 1]`` (a backward of the other phase) are one ``_forward_backward_chunk`` call
    (steps 4 and 5 of ``DualPipe.step``); empty for every other schedule."""
    if name not in ("dualpipe", "dualpipev"):
        return ()
    return tuple(frozenset(i for i, op in enumerate(row[:-1]) if isinstance(op, _Fused))
                 for row in ops)


class _Fused(Op):
    """An F that opens an F&B pair (an ``Op`` for everyone else)."""

    __slots__ = ()


def _dualpipe_rank(rank: int, ranks: int, h: int, count: int, phases) -> list[Op]:
    """One device's ops: steps 1-8 of ``DualPipe.step`` (``ranks`` = its num_half_ranks,
    ``h`` its half_rank; DualPipeV: num_ranks and rank); ``phases[k]`` = (first
    microbatch, chunk) of phase k."""
    nf, nb, w_queue, ops = [0, 0], [0, 0], deque(), []

    def f(ph, cls=Op):
        ops.append(cls("F", phases[ph][0] + nf[ph], phases[ph][1]))
        nf[ph] += 1

    def fb(ph_f, ph_b):  # _forward_backward_chunk: one overlapped F&B op
        f(ph_f, _Fused)
        b(ph_b)

    def b(ph, zb=False):
        mb, c = phases[ph][0] + nb[ph], phases[ph][1]
        nb[ph] += 1
        ops.append(Op("B" if zb else "BW", mb, c))
        if zb:
            w_queue.append(Op("W", mb, c))

    def w():
        ops.append(w_queue.popleft())

    for _ in range((ranks - h - 1) * 2):  # step 1: nF0
        f(0)
    for _ in range(h + 1):  # step 2: nF0F1
        f(0), f(1)
    for _ in range(ranks - h - 1):  # step 3: nB1W1F1 (zero bubble)
        b(1, True), w(), f(1)
    for i in range(count - 2 * ranks + h + 1):  # step 4: nF0B1F1B0
        if i == 0 and h == ranks - 1:  # the middle rank(s): F and B apart, "to further
            f(0), b(1)  # reduce bubble size" (DualPipe.step; DualPipeV: the last rank)
        else:
            fb(0, 1)
        fb(1, 0)
    for _ in range(ranks - h - 1):  # step 5: nB1F1B0
        b(1), fb(1, 0)
    zb = False
    for i in range(h + 1):  # step 6: nB1B0, the second half with zero bubble
        if i == (h + 1) // 2 and h % 2 == 1:
            zb = True
        b(1, zb)
        if i == (h + 1) // 2 and h % 2 == 0:
            zb = True
        b(0, zb)
    for _ in range(ranks - h - 1):  # step 7: nWB0
        w(), b(0, True)
    for _ in range(h + 1):  # step 8: nW
        w()
    if w_queue or nf != [count, count] or nb != [count, count]:
        raise ScheduleError(f"DualPipe's steps left work on device {rank} (a bug).")
    return ops
