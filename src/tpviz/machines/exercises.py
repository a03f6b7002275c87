"""Checkers for chapter 2: rooflines, links and topologies. Every expected number comes from
:mod:`tpviz.core.hardware`."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import jax
import numpy as np
from jax.sharding import PartitionSpec

from tpviz.core import compiled
from tpviz.core import hardware as hw
from tpviz.core.exercises import (
    NotAttempted,
    Wrong,
    as_integer,
    as_number,
    call,
    checker,
    expect_array,
    expect_number,
    is_stub,
)

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
        return hw.roofline("H100", 2 * n * D * F, 2 * (n * D + D * F + n * F)).bound

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


def _cases(seed: int = 2):
    rnd = random.Random(seed)
    for _ in range(200):
        axes = rnd.choice([1, 1, 2, 3])
        sizes = tuple(rnd.choice([2, 4, 8, 16, 6, 5]) for _ in range(axes))
        wraps = tuple(rnd.random() < 0.5 and n > 2 for n in sizes)
        kind = rnd.choice(["all-gather", "reduce-scatter", "all-reduce", "all-to-all"])
        yield kind, rnd.choice([1e3, 1e6, 3e8]), sizes, wraps


@checker("Price a collective on a torus")
def check_torus_price(fn) -> str:
    """``fn(kind, nbytes, sizes, wraps, link, hop)`` -> (latency s, bandwidth s) over every
    axis of a torus with those sizes and wraparounds."""
    if is_stub(fn):
        raise NotAttempted
    link, hop = 4.5e10, 1e-6
    system = replace(hw.TPUS["TPU v5e"], link=link, hop_latency=hop)
    for kind, v, sizes, wraps in _cases():
        want = hw.TpuSlice(system, sizes, wraps).price(kind, v)
        got = call(fn, kind, v, sizes, wraps, link, hop)
        try:
            lat, bw = (as_number(x) for x in got)
        except TypeError:
            raise Wrong("return a pair (latency seconds, bandwidth seconds).") from None
        case = f"{kind} of {v:g} B on sizes {sizes}, wraparound {wraps}"
        if not math.isclose(lat, want.latency_s, rel_tol=1e-6):
            raise Wrong(f"the latency term of {case} is {lat:.3g} s; it should be "
                        "different.", "Hops per axis: n/2 rounded down with wraparound, n - 1 "
                        "without; an all-reduce goes twice.")
        if not math.isclose(bw, want.bandwidth_s, rel_tol=1e-6):
            hint = ("An all-to-all loads each link with b·S(n)/n (ring) or the middle link of a "
                    "line with ⌊n/2⌋⌈n/2⌉ b/n, axis by axis." if kind == "all-to-all" else
                    "Each axis adds 2W with wraparound and W without; (N - 1)/N of V moves.")
            raise Wrong(f"the bandwidth term of {case} is {bw:.3g} s; it should be different.",
                        hint)
    return "200 cases agree with core.hardware."


def _run_gather(fn):
    from tpviz.devices import chosen_devices, make_mesh

    mesh = make_mesh((2, 4), ("x", "y"), devices=chosen_devices()[:8])
    x = np.random.default_rng(3).normal(size=(8 * 64, 512)).astype(np.float32)  # 1 MiB
    prog = jax.jit(jax.shard_map(lambda b: fn(b, ("x", "y")), mesh=mesh,
                                 in_specs=PartitionSpec(("x", "y")), out_specs=PartitionSpec(),
                                 check_vma=False))
    return mesh, x, prog


@checker("A fast gather on a 2×4 slice")
def check_fast_gather(fn) -> str:
    """``fn(block, axes)``: inside shard_map on a (2, 4) mesh ("x", "y"), return the whole
    array from the blocks of ``x[(x, y)]``; priced on a TPU v5e 2×4 slice, within 16 µs."""
    if is_stub(fn):
        raise NotAttempted
    mesh, x, prog = _run_gather(fn)
    got = call(prog, x, what="your gather")
    expect_array(got, x, what="the gathered array",
                 hint="Gather the rows in the order the blocks are numbered: x first, then y.")
    slice_ = hw.tpu("TPU v5e", (2, 4))
    total, kinds = 0.0, []
    for c in compiled.collectives(prog, x):
        if not c.moves_data:
            continue
        axes = compiled.mesh_axes(c, mesh) or ("x", "y")
        v = c.bytes * c.group_size if c.kind in ("reduce-scatter", "all-to-all") else c.bytes
        total += slice_.price(c.kind, v, tuple(mesh.axis_names.index(a) for a in axes)).seconds
        kinds.append(f"{c.kind} over {'+'.join(axes)}")
    us = total * 1e6
    if us > 16:
        hint = ("An all-reduce moves twice the bytes of a gather." if any(
            "all-reduce" in k for k in kinds) else "One axis after the other uses one axis's "
            "links at a time; one collective over both axes uses both at once.")
        raise Wrong(f"the compiled program ({', '.join(kinds)}) takes {us:.1f} µs on the "
                    "slice; the target is 16 µs.", hint)
    return f"{', '.join(kinds)}: {us:.1f} µs on a v5e 2×4 slice."


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
    return (f"torus axes split (x·y) {split}: compute {math_s * 1e3:.2f} ms, FSDP "
            f"{fsdp * 1e3:.2f} ms, TP {tp * 1e3:.2f} ms: compute-bound.")
