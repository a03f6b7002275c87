"""Chapter 2's build checkers, on :mod:`tpviz.core.harness`: a collective priced on a torus
(2.6), and an all-gather passed both ways round a ring (2.7). Expected numbers come from
:mod:`tpviz.core.hardware`."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import jax
import numpy as np
from jax.sharding import PartitionSpec

from tpviz.core import hardware as hw
from tpviz.core import harness
from tpviz.core.exercises import NotAttempted, Wrong, as_number, checker, is_stub

# the functions that answer 2.6: the slice's own price (collective_time calls it) and the ring
# sum of the all-to-all's link load
PRICE = ("tpviz.core.hardware.TpuSlice.price", "tpviz.core.hardware.price.ring_sum")


DRAWN = 20  # tori drawn anew at each check, after the 200 fixed ones


def _cases(seed: int = 2):
    """200 tori from ``seed``, then :data:`DRAWN` from a new seed, with other sizes and byte
    counts: a table of the library's prices made before the check cannot answer those."""
    rnd = random.Random(seed)
    for _ in range(200):
        axes = rnd.choice([1, 1, 2, 3])
        sizes = tuple(rnd.choice([2, 4, 8, 16, 6, 5]) for _ in range(axes))
        wraps = tuple(rnd.random() < 0.5 and n > 2 for n in sizes)
        kind = rnd.choice(["all-gather", "reduce-scatter", "all-reduce", "all-to-all"])
        yield kind, rnd.choice([1e3, 1e6, 3e8]), sizes, wraps
    rnd = random.Random()
    for _ in range(DRAWN):
        sizes = tuple(rnd.randint(2, 24) for _ in range(rnd.choice([1, 2, 3])))
        wraps = tuple(rnd.random() < 0.5 and n > 2 for n in sizes)
        kind = rnd.choice(["all-gather", "reduce-scatter", "all-reduce", "all-to-all"])
        yield kind, float(rnd.randint(1_000, 10**9)), sizes, wraps


@checker("Price a collective on a torus")
def check_torus_price(fn) -> str:
    """``fn(kind, nbytes, sizes, wraps, link, hop)`` -> (latency s, bandwidth s) over every
    axis of a torus with those sizes and wraparounds, on 200 random tori and 20 drawn at each
    check; ``TpuSlice.price`` is out of reach while it runs."""
    if is_stub(fn):
        raise NotAttempted
    link, hop = 4.5e10, 1e-6
    system = replace(hw.TPUS["TPU v5e"], link=link, hop_latency=hop)
    for kind, v, sizes, wraps in _cases():
        got = harness.guarded(fn, kind, v, sizes, wraps, link, hop, what="your function",
                              names=PRICE)
        want = hw.TpuSlice(system, sizes, wraps).price(kind, v)  # after: not on the stack
        try:
            lat, bw = (as_number(x) for x in got)
        except (TypeError, ValueError, Wrong):
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
    return f"{200 + DRAWN} random tori agree with core.hardware."


# --- 2.7 an all-gather both ways round a ring ------------------------------------------------

RING = "ring"  # not the chapter's mesh axes "x" and "y": an answer must use the axis it is given


def _gather_program(fn, case):
    return jax.shard_map(lambda block: fn(block, RING), mesh=case.mesh,
                         in_specs=PartitionSpec(RING), out_specs=PartitionSpec(),
                         check_vma=False)


def _ways(case, found) -> tuple[int, int]:
    k = case.n
    right = {(i, (i + 1) % k) for i in range(k)}
    left = {((i + 1) % k, i) for i in range(k)}
    permutes = [set(c.groups) for c, _ in found if c.kind == "collective-permute"]
    return sum(p == right for p in permutes), sum(p == left for p in permutes)


def _both_ways(case, found) -> str | None:
    k, (right, left) = case.n, _ways(case, found)
    rounds = math.ceil((k - 1) / 2)
    if right + left != len([c for c, _ in found if c.kind == "collective-permute"]):
        return "some sends go to a device that is not a ring neighbour, or not every device sends"
    if max(right, left) > rounds:
        return (f"{max(right, left)} of them go the same way round, so the gather takes "
                f"{max(right, left)} rounds; both ways round it takes {rounds}")
    return None


def _priced(case, found) -> str:
    k, (right, left) = case.n, _ways(case, found)
    block = found[0][0].bytes if found else 0
    one = hw.tpu("TPU v5e", (16, 16)).price("collective-permute", block, (0,))
    rounds = max(right, left)
    return (f"{right} sends clockwise and {left} counter-clockwise: {rounds} rounds of "
            f"{one.seconds * 1e6:.2f} µs with a TPU v5e link (1 µs per hop, 4.5e10 B/s), "
            f"{rounds * one.seconds * 1e6:.2f} µs against {(k - 1) * one.seconds * 1e6:.2f} µs "
            "one way round.")


RING_GATHER = harness.Build(
    what="your gather", layouts=("A[I_{ring}, J]",), out="A[I, J]", axes=(RING,),
    program=_gather_program,
    cases=(((8,), {"rows": 2, "cols": 64}), ((8,), {"rows": 3, "cols": 40}),
           ((4,), {"rows": 4, "cols": 64})),
    inputs=lambda s, rng: (rng.standard_normal((s["devices"] * s["rows"], s["cols"]),
                                               dtype=np.float32),),
    reference=lambda x: x,
    collectives=lambda case: [harness.Expect(
        "collective-permute", case.nbytes("A") // case.n, (RING,), count=case.n - 1,
        what="one block")],
    extra=_both_ways,
    unavailable=("tpviz.collectives.follow", "tpviz.collectives.program"),
    hint="Each round, every device sends one block to each neighbour: what arrived from the left "
         "goes on to the right in the next round, and the other way round. Which block does "
         "each round bring, and where does it go in the result?",
    praise=_priced)


@checker("A gather both ways round a ring")
def check_fast_gather(fn) -> str:
    """``fn(block, axes)`` inside ``shard_map`` over the ring's mesh axis (named by ``axes``):
    returns the whole array from the blocks of ``A[I_ring, J]``, with collective-permutes of one
    block between neighbours, both ways round (⌈(n−1)/2⌉ rounds); on rings of 8 and 4."""
    return harness.grade(fn, RING_GATHER)
