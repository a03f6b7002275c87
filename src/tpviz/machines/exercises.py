"""Checkers for chapter 2: rooflines, links and topologies. Every expected number comes from
:mod:`tpviz.core.hardware`."""

from __future__ import annotations

import itertools
import math

from tpviz.core import hardware as hw
from tpviz.core.exercises import (
    Wrong,
    as_integer,
    as_number,
    checker,
    expect_number,
)
from tpviz.machines.builds import check_fast_gather, check_torus_price  # noqa: F401 (2.6, 2.7)

D = F = 8192  # Exercise 2.1's matmul X[B, D] · W[D, F] in bf16 on an H100
GATHER_V = 64e6  # Exercise 2.2: bytes gathered over each axis of a v5e 8×16 slice
A2A_V = 16e6  # Exercise 2.3: an all-to-all over one 16-axis of a v5e 16×16 slice
# Exercise 2.8: LLaMA-3 70B's MLP, 2M tokens per step on 4096 TPU v5p chips
DESIGN = {"batch": 1 << 21, "chips": 4096, "D": 8192, "F": 28672}


@checker("The batch where a matmul turns compute-bound")
def check_matmul_ridge(answer) -> str:
    """The smallest B for which X[B, 8192] · W[8192, 8192] in bf16 is compute-bound on H100."""
    b = as_integer(answer)
    ridge = hw.CHIPS["H100"].ridge()

    def bound(n):
        return hw.roofline("H100", 2 * n * D * F, 2 * (n * D + D * F + n * F), "bf16").bound

    want = next(n for n in range(1, 10**5) if bound(n) == "compute")
    if b == round(ridge):
        raise Wrong("that is the ridge itself; the matmul also reads W and writes its output.",
                    "Its intensity is 2BDF / (2(BD + DF + BF)), a little below B.")
    if b != want:
        said = ("memory-bound" if bound(b) == "memory" else
                "compute-bound, but so is a smaller B")
        raise Wrong(f"at B = {b} the matmul is {said}.",
                    "Find the smallest B whose intensity reaches the chip's ridge C / W_hbm.")
    return f"B = {want}: the ridge of an H100 is {ridge:,.0f} FLOPs per byte."


@checker("Wraparound on an 8×16 slice")
def check_wraparound(answer) -> str:
    """(µs along axis 0, µs along axis 1) of an all-gather of 64 MB on a v5e 8×16 slice."""
    try:
        t0, t1 = (as_number(t) for t in answer)
    except TypeError:
        raise Wrong("give a pair (axis 0 µs, axis 1 µs).") from None
    s = hw.tpu("TPU v5e", (8, 16))
    want = [s.collective_time("all-gather", GATHER_V, (a,)) * 1e6 for a in (0, 1)]
    ring8 = hw.tpu("TPU v5e", (8, 16), wrap=(True, True)).collective_time(
        "all-gather", GATHER_V, (0,)) * 1e6
    if math.isclose(t0, ring8, rel_tol=1e-2):
        raise Wrong("axis 0 has no wraparound on a v5e (only axes of 16 do).",
                    "Without wraparound the end chips receive everything over one link.")
    expect_number(t0, want[0], what="axis 0's time", rel=1e-2,
                  hint="A line of 8: 7/8 of V over one link of 4.5e10 B/s, and 7 hops of 1 µs.")
    expect_number(t1, want[1], what="axis 1's time", rel=1e-2,
                  hint="A ring of 16: both directions, 8 hops of 1 µs.")
    return f"{want[0]:,.0f} µs against {want[1]:,.0f} µs: wraparound halves the time."


@checker("An all-to-all on a ring")
def check_ring_all_to_all(answer) -> str:
    """ms of an all-to-all of V = 16 MB over axis 0 of a v5e 16×16 slice, latency included."""
    got = as_number(answer)
    p = hw.tpu("TPU v5e", (16, 16)).price("all-to-all", A2A_V, (0,))
    want, bandwidth = p.seconds * 1e3, p.bandwidth_s * 1e3
    switch = 15 / 256 * A2A_V / 9e10 * 1e3
    for off in (0, p.latency_s * 1e3):  # a switch's all-to-all, with or without the hops
        if math.isclose(got, switch + off, rel_tol=0.02):
            raise Wrong("that is the all-to-all of a switch, where every peer is one hop away.",
                        "On a ring a message to a peer d hops away loads d links.")
    if math.isclose(got, bandwidth, rel_tol=0.02):
        raise Wrong("that is the bandwidth term alone; the question includes the latency.",
                    "Add the hops: the farthest peer on a ring of 16 is 8 hops away.")
    expect_number(got, want, what="your time (ms)", rel=1e-2,
                  hint="Each link carries V/8 each way: V / (4 W_bidi) plus 8 hops of 1 µs.")
    return (f"{want:,.4f} ms: {bandwidth:,.4f} ms of bandwidth, a quarter of an all-gather of "
            f"the same V, and {p.latency_s * 1e6:.0f} µs of hops.")


@checker("Where latency stops mattering")
def check_hop_crossover(answer) -> str:
    """V (bytes) at which an all-gather over one 16-axis of a v5e has equal terms."""
    got = as_number(answer)
    p = hw.tpu("TPU v5e", (16, 16)).price("all-gather", 1.0, (0,))
    want = p.latency_s / p.bandwidth_s  # the bandwidth term grows linearly with V
    if math.isclose(got, 8e-6 * 9e10, rel_tol=1e-3):
        raise Wrong("you left out the (N - 1)/N of the ring.", "Only 15/16 of V moves.")
    if math.isclose(got, want * 15 / 8, rel_tol=1e-2):
        raise Wrong("you counted the hops one way round the ring.",
                    "With both directions a shard travels at most 8 hops.")
    expect_number(got, want, what="your V", rel=1e-2,
                  hint="Set 8 hops × 1 µs equal to (15/16) V / 9e10 B/s.")
    return f"{want:,.0f} bytes: below it the gather is latency-bound."


@checker("What SHARP buys")
def check_sharp(answer) -> str:
    """Time without / time with SHARP of an all-reduce of 1 GB on one 8-GPU H100 node."""
    got = as_number(answer)
    plain = hw.gpu_cluster("H100", 8).collective_time("all-reduce", 1e9)
    sharp = hw.gpu_cluster("H100 + SHARP", 8).collective_time("all-reduce", 1e9)
    if math.isclose(got, 2.0, rel_tol=1e-3):
        raise Wrong("a ring all-reduce sends 2 (N - 1)/N of V, not 2V.")
    expect_number(got, plain / sharp, what="your ratio", rel=1e-2,
                  hint="Without: 2 (N-1)/N · V / W. With: V / W.")
    return f"{plain / sharp:.2f}× in theory (the Scaling Book measured about 1.3×)."


def pod_layouts(axes: int = 3, size: int = 16) -> dict[tuple[int, int, int, int], tuple]:
    """Every (X, Y, M_X, M_Y) a pod of ``axes`` torus axes of ``size`` chips can hold: each axis
    split as x_a · y_a = size (x_a along X, y_a along Y), M counting the axes with a factor
    above 1; the value is one split that makes it, ((x_a, y_a) per axis)."""
    factors = [f for f in range(1, size + 1) if size % f == 0]
    found = {}
    for xs in itertools.product(factors, repeat=axes):
        ys = tuple(size // x for x in xs)
        key = (math.prod(xs), math.prod(ys), sum(x > 1 for x in xs), sum(y > 1 for y in ys))
        found.setdefault(key, tuple(zip(xs, ys, strict=True)))
    return found


def strict_times(key, w: float, size: int = 16) -> tuple[float, float]:
    """(FSDP, TP) seconds of layout ``key`` = (X, Y, M_X, M_Y) read strictly, the best over its
    splits: a torus axis whole to one mesh axis gives it W = 2 links (a ring); a shared one
    gives the mesh axis whose chips sit side by side a segment (one link: no wraparound) and
    the other a ring strided across the segments (W over the segment's length: the segments'
    rings share every link). Still optimistic: the two axes' transfers do not share links."""
    x, y = key[:2]
    b, d, f = (DESIGN[k] for k in ("batch", "D", "F"))
    best, factors = (math.inf, math.inf), [a for a in range(1, size + 1) if size % a == 0]
    for xs in itertools.product(factors, repeat=3):
        ys = tuple(size // a for a in xs)
        if (math.prod(xs), math.prod(ys), sum(a > 1 for a in xs), sum(c > 1 for c in ys)) != key:
            continue
        for inner_y in (True, False):
            wx = sum(w if a == size else 0.0 if a == 1 else w / 2 if not inner_y else w / c
                     for a, c in zip(xs, ys, strict=True))
            wy = sum(w if c == size else 0.0 if c == 1 else w / 2 if inner_y else w / a
                     for a, c in zip(xs, ys, strict=True))
            times = (4 * d * f / (y * wx) if x > 1 else 0.0, 4 * b * d / (x * wy) if y > 1
                     else 0.0)
            best = min(best, times, key=max)
    return best


@checker("Design: FSDP × tensor parallelism on a v5p pod")
def check_pod_design(x, y, m_x, m_y) -> str:
    """X·Y = 4096 chips laid out on the 16×16×16 pod (each torus axis split between X and Y;
    M_X, M_Y the axes each spans): LLaMA-3 70B's MLP compute-bound forward."""
    x, y, m_x, m_y = (as_integer(v) for v in (x, y, m_x, m_y))
    b, n, d, f = (DESIGN[k] for k in ("batch", "chips", "D", "F"))
    if x * y != n or min(x, y) < 1:
        raise Wrong(f"X·Y = {x * y:,} chips; the pod has {n:,}.")
    layouts = pod_layouts()
    if (x, y, m_x, m_y) not in layouts:
        if not 0 <= m_x <= 3 or not 0 <= m_y <= 3 or m_x + m_y < 3:
            why = ("every one of the 3 torus axes is spanned by X, Y or both, so "
                   "M_X + M_Y is 3 or more, each at most 3")
        elif x > 16**m_x or y > 16**m_y:
            big, m = (x, m_x) if x > 16**m_x else (y, m_y)
            why = f"{m} torus axes of 16 hold at most {16**m:,} chips, not {big:,}"
        else:
            why = (f"with M_X + M_Y = {m_x + m_y}, {m_x + m_y - 3} torus axes are shared and "
                   f"the other {6 - m_x - m_y} belong whole to X or Y, which does not give "
                   f"X = {x:,} and Y = {y:,}")
        raise Wrong(f"(X, Y, M_X, M_Y) = ({x}, {y}, {m_x}, {m_y}) cannot be laid out on a "
                    f"16×16×16 pod: {why}.",
                    "Split each torus axis as x_a · y_a = 16; X = Π x_a, Y = Π y_a, and M "
                    "counts the factors above 1.")
    s = hw.TPUS["TPU v5p"]
    c, w = s.chip.peak(), 2 * s.link
    math_s = 4 * b * d * f / (n * c)
    fsdp = 4 * d * f / (y * w * m_x) if x > 1 else 0.0
    tp = 4 * b * d / (x * w * m_y) if y > 1 else 0.0
    if tp > math_s:
        raise Wrong(f"tensor parallelism over {y} chips is communication-bound "
                    f"({tp * 1e3:.2f} ms against {math_s * 1e3:.2f} ms of math).",
                    "Y must stay below M_Y · F / α.")
    if fsdp > math_s:
        raise Wrong(f"FSDP over {x} chips is communication-bound ({fsdp * 1e3:.2f} ms against "
                    f"{math_s * 1e3:.2f} ms of math).", "X must stay below B · M_X / α.")
    split = " × ".join(f"{xa}·{ya}" for xa, ya in layouts[(x, y, m_x, m_y)])
    strict = max(strict_times((x, y, m_x, m_y), w))
    admitted = [k for k in layouts if max(
        4 * d * f / (k[1] * w * k[2]) if k[0] > 1 else 0.0,
        4 * b * d / (k[0] * w * k[3]) if k[1] > 1 else 0.0) <= math_s]
    held = sum(max(strict_times(k, w)) <= math_s for k in admitted)
    caveat = (" Read strictly (a shared axis gives one mesh axis a segment without "
              "wraparound, the other a ring strided across the segments) it still is "
              f"({strict * 1e3:.2f} ms)." if strict <= math_s else
              " But it leans on the model's optimism about shared axes: read strictly (a "
              "segment without wraparound for one mesh axis, a ring strided across the "
              "segments for the other) its slower axis takes "
              f"{strict * 1e3:.2f} ms; {held} of the {len(admitted)} layouts the model "
              "admits hold even then.")
    return (f"torus axes split (x·y) {split}: compute {math_s * 1e3:.2f} ms, FSDP "
            f"{fsdp * 1e3:.2f} ms, TP {tp * 1e3:.2f} ms: compute-bound.{caveat}")
