"""Chapter 7's op orders: naive, GPipe, 1F1B, interleaved 1F1B and ZB-H1 (every device's ops
for one step). :mod:`tpviz.pipeline.zoo` builds chapter 8's on 1F1B's;
:func:`tpviz.pipeline.plan.schedule` picks one by name."""

from __future__ import annotations

from tpviz.pipeline.ops import Op


def naive(p: int, m: int) -> list[list[Op]]:
    """One microbatch at a time, all the way forward and back: no two devices ever overlap."""
    return [[op for i in range(m) for op in (Op("F", i, d), Op("B", i, d))] for d in range(p)]


def gpipe(p: int, m: int) -> list[list[Op]]:
    """All forwards, then all backwards (GPipe): m microbatches of activations held per device."""
    return [[Op("F", i, d) for i in range(m)] + [Op("B", i, d) for i in range(m)]
            for d in range(p)]


def one_f_one_b(p: int, m: int) -> list[list[Op]]:
    """1F1B (PipeDream-Flush): p - d - 1 warm-up forwards, then alternate F and B, then drain."""
    ops = []
    for d in range(p):
        warmup = min(p - d - 1, m)
        f = [Op("F", i, d) for i in range(m)]
        b = [Op("B", i, d) for i in range(m)]
        ops.append(f[:warmup] + _alternate(f[warmup:], b[:m - warmup]) + b[m - warmup:])
    return ops


def interleaved(p: int, m: int, v: int) -> list[list[Op]]:
    """Megatron-LM's interleaved 1F1B: each device holds v chunks; microbatches go in groups of p.

    The k-th forward of a device is microbatch ``(k // (p v)) p + k % p`` through its chunk
    ``(k // p) % v``; backwards run the chunks in reverse. Device d warms up with
    ``2 (p - d - 1) + (v - 1) p`` forwards (the order of Megatron-LM and of PyTorch's
    ``ScheduleInterleaved1F1B``).
    """
    total = m * v
    # (microbatch, chunk) of the k-th forward and the k-th backward: the same on every device
    fwd = [((k // (p * v)) * p + k % p, (k // p) % v) for k in range(total)]
    bwd = [(mb, v - 1 - c) for mb, c in fwd]
    new = tuple.__new__  # building Op through tuple.__new__ is several times faster
    ops = []
    for d in range(p):
        f = [new(Op, ("F", mb, c * p + d)) for mb, c in fwd]
        b = [new(Op, ("B", mb, c * p + d)) for mb, c in bwd]
        warmup = min(2 * (p - d - 1) + (v - 1) * p, total)
        ops.append(f[:warmup] + _alternate(f[warmup:], b[:total - warmup]) + b[total - warmup:])
    return ops


def _alternate(first: list, second: list) -> list:
    """[a0, b0, a1, b1, ...] for two lists of the same length (slice assignment: fast)."""
    out = [None] * (2 * len(first))
    out[::2], out[1::2] = first, second
    return out


def zb_h1(p: int, m: int) -> list[list[Op]]:
    """ZB-H1 (zero bubble, the peak memory of 1F1B): 1F1B's order of F and B (input gradients), with
    each weight-gradient W deferred to fill what would be idle time: device d holds back its
    first d W's and runs them in the drain, where 1F1B waits."""
    ops = []
    for seq in one_f_one_b(p, m):
        d = seq[0].chunk
        out, pending = [], []
        for op in seq:
            out.append(op)
            if op.kind == "B":
                pending.append(Op("W", op.microbatch, d))
                if len(pending) > d:  # keep d W's in reserve for the drain
                    out.append(pending.pop(0))
        out += pending
        ops.append(out)
    return ops
