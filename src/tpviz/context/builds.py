"""Chapter 9's build checkers, on :mod:`tpviz.core.harness`: ring attention in ``shard_map``
(9.4: N − 1 permutes, each to the neighbour, of one key/value block, no array of the whole
sequence's keys or values in the compiled program, and an online merge: the bytes the traced
program holds do not grow with N) and DeepSpeed-Ulysses (9.7: all-to-alls from
sequence shards to head shards and back)."""

from __future__ import annotations

import re

import jax
import numpy as np

from tpviz.context.plan import AXIS
from tpviz.context.run import attention
from tpviz.core import harness, liveness
from tpviz.core.exercises import checker

CONTEXT = (AXIS,)
# the library's schemes: each is the answer to one of these exercises
SCHEMES = ("tpviz.context.ring.ring_attention", "tpviz.context.ring.forward",
           "tpviz.context.ring.backward", "tpviz.context.ring.step",
           "tpviz.context.run.ulysses_attention", "tpviz.context.run.usp_attention",
           "tpviz.context.run.allgather_attention", "tpviz.context.run.program",
           "tpviz.context.run._to_heads", "tpviz.context.run._to_sequence")
SEQ = "Q[B, S_{context}, N, D]"


def _qkv(s: dict, rng) -> tuple:
    shape = (s["B"], s["S"], s["heads"], s["d"])
    return tuple(rng.standard_normal(shape, dtype=np.float32) for _ in range(3))


def _reference(q, k, v):
    return np.asarray(attention(q, k, v))


def _block(case) -> int:
    s = case.sizes
    return 2 * s["B"] * s["S"] // case.n * s["heads"] * s["d"] * 4  # [2, B, S/N, n_h, d_h]


def _ring_pairs(case, found) -> str | None:
    """Every permute passes the block one step round the ring, all the same way."""
    n = case.n
    shifts = set()
    for c, _ in found:
        steps = {(b - a) % n for a, b in c.groups}
        if len(steps) != 1 or len(c.groups) != n:
            return ("a permute that does not move every device's block one step round the "
                    f"ring (pairs {sorted(c.groups)[:4]}…)")
        shifts |= steps
    if shifts - {1, n - 1} or len(shifts) > 1:
        far = sorted(shifts - {1, n - 1})
        return (f"a permute sends each block {far[0] if far else 'both ways'} steps round the "
                "ring at once: each step of a ring passes the block it holds to its neighbour"
                if far else "permutes in both directions: a ring passes the blocks one way")
    return None


_SHAPES = re.compile(r"\b[a-z]+\d*\[([\d,]*)\]")


def _whole_sequence(case, memory, program) -> str | None:
    """No array the program holds spans the whole sequence's keys or values (or scores)."""
    s = case.sizes
    held = {tuple(int(x) for x in m.group(1).split(",") if x)
            for m in _SHAPES.finditer(program.as_text())}
    whole = [shape for shape in held if s["S"] in shape
             and int(np.prod(shape)) >= s["B"] * s["S"] * s["heads"] * s["d"] // 2]
    if whole:
        shape = max(whole, key=lambda t: int(np.prod(t)))
        return (f"the compiled program holds an array of shape {list(shape)} "
                f"({int(np.prod(shape)) * 4:,} bytes), which spans the whole sequence of "
                f"{s['S']} tokens: ring attention holds one key/value block at a time "
                f"({_block(case):,} bytes), and merges each with the online softmax. Its "
                f"temporaries here: {memory.temp:,} bytes.")
    return None


def _online(case, trace) -> str | None:
    """The bytes the learner's ring holds at once (its traced program, :mod:`~tpviz.core.
    liveness`) on 4 and on 8 devices, with this case's block: an online merge holds the same
    few blocks whatever N; keeping every block, or every block's partial result, grows with N."""
    s = case.sizes
    c = s["S"] // case.n
    held = {}
    for n in (4, 8):
        args = [jax.ShapeDtypeStruct((s["B"], n * c, s["heads"], s["d"]), np.float32)] * 3
        held[n] = liveness.shard_map_peak(trace((n,), args))
    block = 2 * s["B"] * c * s["heads"] * s["d"] * 4
    if held[8] - held[4] > block // 4:
        return (f"with blocks of S/N = {c} tokens, your traced program holds up to "
                f"{held[4]:,} bytes at once on 4 devices and {held[8]:,} on 8: "
                f"{(held[8] - held[4]) / block:.1f} key/value blocks ({block:,} bytes each) "
                "more, so it keeps what arrives (the blocks, or each block's result) and merges "
                "at the end. Ring attention merges each block into o and lse as it arrives, so "
                "that what a device holds does not grow with N")
    return None


RING_CASES = (((4,), {"B": 1, "S": 48, "heads": 2, "d": 8}),
              ((4,), {"B": 2, "S": 40, "heads": 3, "d": 4}),
              ((8,), {"B": 1, "S": 64, "heads": 2, "d": 8}),
              ((2,), {"B": 1, "S": 36, "heads": 2, "d": 6}))

RING = harness.Build(
    what="your ring", layouts=(SEQ, SEQ, SEQ), names=("q", "k", "v"), out=SEQ, axes=CONTEXT,
    cases=RING_CASES, inputs=_qkv, reference=_reference,
    collectives=lambda case: [harness.Expect("collective-permute", _block(case), CONTEXT,
                                             count=case.n - 1, what="the key/value block")],
    extra=_ring_pairs, memory=_whole_sequence, traced=_online, unavailable=SCHEMES,
    vma="either",
    hint="After each step, pass the block you hold to the next device and attend to the one "
         "that arrives; the first block is the device's own, and the last needs no passing on.",
    praise="Ring attention: one key/value block in hand at a time.", rtol=1e-4, atol=1e-4)


@checker("The ring in shard_map")
def check_ring_step(fn) -> str:
    """``fn(q, k, v)`` per device inside ``shard_map`` over the axis "context" (``[B, S/N, n_h,
    d_h]`` each): non-causal ring attention. On 4, 8 and 2 devices at several sizes, against
    full attention; the compiled program holds exactly N − 1 permutes of the stacked key/value
    block, each one step round the ring, and no array of the whole sequence; and the traced
    program holds no more bytes on 8 devices than on 4 at the same block (an online merge)."""
    return harness.grade(fn, RING)


# --- 9.7 DeepSpeed-Ulysses ---------------------------------------------------------------------

def _ulysses_collectives(case, found) -> str | None:
    """All-to-alls along "context" only: q, k, v to head shards (3 buffers, or one stacked) and
    the output back (1), the bytes of 4 buffers of [B, S/N, n_h, d_h]."""
    s = case.sizes
    one = s["B"] * s["S"] // case.n * s["heads"] * s["d"] * 4
    other = [(c.kind, axes) for c, axes in found if c.kind != "all-to-all"
             or tuple(axes or ()) != CONTEXT]
    if other:
        kind, axes = other[0]
        along = "×".join(repr(a) for a in axes or ()) or "a group of devices"
        return (f"{'an' if kind[0] == 'a' else 'a'} {kind} along {along}: Ulysses moves its "
                "data by all-to-all only")
    sizes = sorted(c.full_bytes for c, _ in found)
    if sum(sizes) != 4 * one:
        return (f"all-to-alls of {sizes} bytes, {sum(sizes):,} in all: Ulysses exchanges q, k, v "
                f"and the output, {4 * one:,} bytes ({one:,} each)")
    if sizes not in ([one] * 4, [one, 3 * one], [one, one, 2 * one]):
        return f"all-to-alls of {sizes} bytes: each exchanges whole [B, S/N, n_h, d_h] buffers"
    return None


ULYSSES = harness.Build(
    what="your Ulysses attention", layouts=(SEQ, SEQ, SEQ), names=("q", "k", "v"), out=SEQ,
    axes=CONTEXT, inputs=_qkv, reference=_reference,
    cases=(((4,), {"B": 1, "S": 32, "heads": 8, "d": 4}),
           ((4,), {"B": 2, "S": 24, "heads": 4, "d": 6}),
           ((8,), {"B": 1, "S": 32, "heads": 8, "d": 4}),
           ((2,), {"B": 1, "S": 20, "heads": 6, "d": 4})),
    extra=_ulysses_collectives, unavailable=SCHEMES, vma="either",
    hint="Before the attention each device needs the whole sequence for some of the heads; "
         "after it, its own tokens for all of them.",
    praise="DeepSpeed-Ulysses: sequence shards to head shards and back.", rtol=1e-4,
    atol=1e-4)


@checker("DeepSpeed-Ulysses in shard_map")
def check_ulysses(fn) -> str:
    """``fn(q, k, v)`` per device inside ``shard_map`` over "context" (``[B, S/N, n_h, d_h]``
    each, n_h divisible by N): non-causal attention by DeepSpeed-Ulysses. On 4, 8 and 2 devices
    at several sizes against full attention; the compiled program holds only all-to-alls along
    "context", 4 buffers' bytes in all (q, k, v in, the output back)."""
    return harness.grade(fn, ULYSSES)
