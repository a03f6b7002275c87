"""A second, independent reading of deepseek-ai/DualPipe's ``DualPipe.step`` and
``DualPipeV.step`` (steps 1-8, with their receives, sends and commits), timed on ideal devices.
Written from DeepSeek's code, not from ``tpviz.pipeline.zoo``, so the tests can compare the two.

Two models of communication:

- ``"ideal"``: every compute waits only for its own inputs, and an output is there the moment
  its op ends (in an F&B pair, the forward's output after the forward's part);
- ``"code"``: the code's own program order. ``_recv_*`` queues a receive; every compute call
  first runs ``_commit_and_wait_comm``, which waits for *all* receives queued since the last
  one (also one the code queues ahead for the next op); a send leaves where the code calls it
  (some one op late). Sends themselves are free.

Times are per stage: ``t_f``, ``t_b`` (input gradient) and ``t_w``; a full backward is
``t_b + t_w``, an F&B pair ``t_f + t_b + t_w``.
"""

from __future__ import annotations

from collections import deque


def program(v: bool, n: int, m: int, r: int) -> list[tuple]:
    """Rank r's instructions: DualPipeV (``v``: n ranks, 2n stages) or DualPipe (n ranks)."""
    out: list[tuple] = []
    if v:
        ranks, h, middle, step4 = n, r, r == n - 1, m - 2 * n + r + 1
    else:
        ranks, h = n // 2, min(r, n - 1 - r)
        middle, step4 = r in (n // 2 - 1, n // 2), m // 2 - n + h + 1

    def fwd(ph, recv=True, send=True):
        out.extend([("recvF", ph)] * recv + [("commit",), ("F", ph)] + [("sendF", ph)] * send)

    def bwd(ph, zb=False, recv=True, send=True):
        out.extend([("recvB", ph)] * recv + [("commit",), ("B", ph, zb)] + [("sendB", ph)] * send)

    def fb(p0, p1, recv0=True):
        out.extend([("recvF", p0)] * recv0 + [("recvB", p1), ("commit",), ("FB", p0, p1),
                                              ("sendF", p0), ("sendB", p1)])

    def w():
        out.extend([("commit",), ("W",)])

    for _ in range((ranks - h - 1) * 2):  # step 1
        fwd(0)
    out.append(("recvF", 0))  # step 2
    for i in range(h + 1):
        fwd(0, recv=False, send=middle and not v)
        out.append(("recvF", 0))
        fwd(1, send=(not middle) or i < h)
        if v or not middle:
            out.append(("sendF", 0))
    for _ in range(ranks - h - 1):  # step 3
        bwd(1, zb=True)
        out.append(("recvF", 1))
        w()
        fwd(1, recv=False)
    for i in range(step4):  # step 4
        if i == 0 and middle:
            fwd(0, recv=False, send=False)
            out.append(("sendF", 1))
            bwd(1, send=False)
            out.extend([("sendF", 0), ("sendB", 1)])
        else:
            fb(0, 1, recv0=i > 0)
        fb(1, 0)
    for _ in range(ranks - h - 1):  # step 5
        bwd(1)
        fb(1, 0)
    zb = False
    for i in range(h + 1):  # step 6
        if i == (h + 1) // 2 and h % 2 == 1:
            zb = True
        bwd(1, zb)
        if i == (h + 1) // 2 and h % 2 == 0:
            zb = True
        bwd(0, zb)
    for _ in range(ranks - h - 1):  # step 7
        w()
        bwd(0, zb=True)
    for _ in range(h + 1):  # step 8
        w()
    out.append(("commit",))
    return out


def phases(v: bool, n: int, m: int, r: int) -> tuple[dict, int]:
    """Per phase: (model chunk, microbatches in order); and the number of model chunks."""
    if v:
        return {0: (r, list(range(m))), 1: (2 * n - 1 - r, list(range(m)))}, 2 * n
    down, up = (r, list(range(m // 2))), (n - 1 - r, list(range(m // 2, m)))
    return ({0: down, 1: up} if r < n // 2 else {0: up, 1: down}), n


def idle(v: bool, n: int, m: int, t_f: float, t_b: float, t_w: float,
         comm: str = "ideal") -> float:
    """Makespan minus rank 0's compute time, one step."""
    progs = [program(v, n, m, r) for r in range(n)]
    lay = [phases(v, n, m, r)[0] for r in range(n)]
    chunks = phases(v, n, m, 0)[1]
    full = t_b + t_w
    pc, clock, work = [0] * n, [0.0] * n, [0.0] * n
    count = [{k: [0, 0] for k in ("F", "B", "sF", "sB", "rF", "rB")} for _ in range(n)]
    pending: list[list] = [[] for _ in range(n)]
    w_queue = [deque() for _ in range(n)]
    done: dict = {}  # (kind, microbatch, chunk) -> end of its compute
    sent: dict = {}  # the same -> when the code sends it

    def key(r, kind, ph, k):
        c, mbs = lay[r][ph]
        return (kind, mbs[k], c)

    def needs(op):
        kind, mb, c = op
        if kind == "F":
            return None if c == 0 else ("F", mb, c - 1)
        return ("F", mb, c) if c == chunks - 1 else ("B", mb, c + 1)

    def local(r, op):
        return any(c == op[2] and op[1] in mbs for c, mbs in lay[r].values())

    def ready(r, op):
        if op is None:
            return 0.0
        return sent.get(op) if comm == "code" and not local(r, op) else done.get(op)

    moved = True
    while moved:
        moved = False
        for r in range(n):
            start = pc[r]
            while pc[r] < len(progs[r]):
                ins, cnt = progs[r][pc[r]], count[r]
                kind = ins[0]
                if kind in ("recvF", "recvB"):
                    ph, tag = ins[1], "r" + kind[-1]
                    op = needs(key(r, kind[-1], ph, cnt[tag][ph]))
                    if comm == "code" and op is not None and not local(r, op):
                        pending[r].append(op)
                    cnt[tag][ph] += 1
                elif kind == "commit":
                    if comm == "code":
                        times = [sent.get(op) for op in pending[r]]
                        if None in times:
                            break
                        clock[r] = max([clock[r], *times])
                        pending[r] = []
                elif kind in ("sendF", "sendB"):
                    ph, tag = ins[1], "s" + kind[-1]
                    sent[key(r, kind[-1], ph, cnt[tag][ph])] = clock[r]
                    cnt[tag][ph] += 1
                elif kind == "W":
                    clock[r] += t_w
                    work[r] += t_w
                    w_queue[r].popleft()
                else:  # F, B or an F&B pair
                    ph_f = ins[1] if kind != "B" else None
                    ph_b = {"B": ins[1], "FB": ins[-1]}.get(kind)
                    ops = ([key(r, "F", ph_f, cnt["F"][ph_f])] if ph_f is not None else []) + (
                        [key(r, "B", ph_b, cnt["B"][ph_b])] if ph_b is not None else [])
                    inputs = [ready(r, needs(op)) for op in ops]
                    if None in inputs:
                        break
                    t0 = max(clock[r], *inputs)
                    length = {"F": t_f, "B": t_b if kind == "B" and ins[2] else full,
                              "FB": t_f + full}[kind]
                    clock[r] = t0 + length
                    work[r] += length
                    for op in ops:
                        done[op] = t0 + t_f if (kind == "FB" and op[0] == "F"
                                                and comm == "ideal") else clock[r]
                    if kind == "B" and ins[2]:
                        w_queue[r].append(ops[0])
                    for op, ph in zip(ops, [x for x in (ph_f, ph_b) if x is not None],
                                      strict=True):
                        cnt[op[0]][ph] += 1
                pc[r] += 1
            moved |= pc[r] != start
    if any(pc[r] < len(progs[r]) for r in range(n)):
        raise RuntimeError("the transcription deadlocks")
    return max(clock) - work[0]
