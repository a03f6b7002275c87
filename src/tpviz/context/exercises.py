"""Checkers for the context-parallelism chapter: ring bytes, Ulysses' saving, the online-softmax
combine, the ring in ``shard_map``, the causal imbalance, and a design."""

from __future__ import annotations

import functools

import jax
import numpy as np

from tpviz.context.compare import layer, memory
from tpviz.context.plan import LAYOUTS, SCHEMES, causal_work, plan
from tpviz.context.run import block_attention
from tpviz.core import harness
from tpviz.core.exercises import (
    Wrong,
    as_number,
    checker,
    expect_array,
    expect_bytes,
    expect_number,
    plain,
)


@checker("Ring attention's bytes")
def check_ring_attention_bytes(answer) -> str:
    """Bytes each device sends in one ring-attention forward pass: N = 8, S = 32,768,
    H = 4,096, B = 1, bf16."""
    n, s, h = 8, 32768, 4096
    want = plan("ring", s, 32, h, n, dtype="bf16").sent_bytes()
    if answer == want / 2:
        raise Wrong("that counts only the keys (or only the values).", "Both travel.")
    if answer == want * n / (n - 1):
        raise Wrong("that counts N permutes.", "After the last step no block needs to move.")
    if answer == want * 2:
        raise Wrong("that counts 4 bytes per value.", "bf16 is 2 bytes.")
    expect_bytes(answer, want, hint="Each step passes this device's key and value block, "
                  "[2, S/N, H] values, to the next device.")
    return f"{want / 2**20:,.0f} MiB: 2(N-1)/N · S·H·b, the bytes of one all-gather of K and V."


@checker("Ulysses against the ring")
def check_ulysses_ratio(answer) -> str:
    """How many times fewer bytes Ulysses sends than ring attention per layer (forward), N = 16."""
    n, s, h = 16, 65536, 8192
    want = (plan("ring", s, 64, h, n).sent_bytes() / plan("ulysses", s, 64, h, n).sent_bytes())
    if answer == 1 / want:
        raise Wrong("that is the ring against Ulysses.", "Ulysses sends fewer bytes.")
    if answer == n:
        raise Wrong("that leaves out how many arrays each scheme moves.",
                    "Ring: keys and values; Ulysses: q, k, v and the output.")
    expect_number(answer, want, hint="Write both volumes per device: ring (N-1)·2·(S/N)·H·b; "
                  "an all-to-all of an [S/N, H] buffer sends (N-1)/N of it.")
    return f"{want:g} = N/2: Ulysses' bytes fall as 1/N, the ring's stay near 2·S·H·b."


@functools.cache
def _blocks():
    """Two key blocks' attention and the whole's, compiled once per process."""
    return jax.jit(lambda q, k, v: (block_attention(q, k[:, :4], v[:, :4]),
                                    block_attention(q, k[:, 4:], v[:, 4:]),
                                    block_attention(q, k, v)))


COMBINE = ("tpviz.context.ring.combine",)  # the library's own: what 9.3 asks for


@checker("The online-softmax combine")
def check_online_combine(fn) -> str:
    """``fn(o1, lse1, o2, lse2) -> (o, lse)``: the attention of the same queries over two key
    blocks merged (``o[B, c, n, d]`` normalised, ``lse[B, c, n]``); at several sizes, with
    log-sum-exps far above and below what ``exp`` of a float32 can hold."""
    if not callable(fn):  # before compiling the reference
        raise Wrong(f"your combine should be a function, but it is a {type(fn).__name__}.")
    rng = np.random.default_rng(3)
    blocks = _blocks()
    hint = ("Combine the two log-sum-exps without leaving float32's range: e^1000 is infinite "
            "and e^-1000 is 0.")
    # (scale of the scores, shift of both log-sum-exps): a shift leaves o as it is and moves
    # lse by the same amount; e^lse of float32 overflows above 88 and underflows below -103
    # the last case is drawn anew at each check: a table of the library's results made before
    # the check cannot answer it
    drawn = np.random.default_rng()
    last = (float(drawn.uniform(1, 8)), float(drawn.choice([-1, 1]) * drawn.uniform(200, 1000)))
    for (scale, shift), r in (((1.0, 0.0), rng), ((8.0, 0.0), rng), ((1.0, 1000.0), rng),
                              ((2.0, -1000.0), rng), (last, drawn)):
        q = (r.standard_normal((1, 4, 2, 8)) * scale).astype(np.float32)
        k, v = (r.standard_normal((1, 8, 2, 8)).astype(np.float32) for _ in range(2))
        (o1, lse1), (o2, lse2), (want_o, want_lse) = blocks(q, k, v)
        lse1, lse2, want_lse = (np.asarray(t) + np.float32(shift) for t in (lse1, lse2, want_lse))
        got = plain(harness.guarded(fn, o1, lse1, o2, lse2, what="your combine",
                                    names=COMBINE), "your combine")
        if not isinstance(got, tuple | list) or len(got) != 2:
            raise Wrong("combine should return two arrays: (o, lse).")
        o, lse = (np.asarray(t) for t in got)
        where = f" (log-sum-exps near {shift:+g})" if shift else ""
        if (o.shape == want_o.shape and np.allclose(o, (o1 + o2) / 2, atol=1e-5)
                and not np.allclose(o, want_o, atol=1e-4)):
            raise Wrong("that averages the two outputs.", "Weigh each by its share of the "
                        "softmax's denominator, e^lse.")
        if shift and (not np.isfinite(lse).all() or not np.isfinite(o).all()):
            raise Wrong(f"right for ordinary scores, but with log-sum-exps near {shift:+g} your "
                        "result holds inf or NaN: e^lse left float32's range.", hint)
        expect_array(lse, want_lse, what="lse" + where, rtol=1e-4, atol=1e-3, hint=hint)
        expect_array(o, np.asarray(want_o), what="o" + where, rtol=1e-4, atol=1e-4, hint=hint)
    return "that is FlashAttention's running max and sum, one block at a time."


IMBALANCE_DEVICES = 16


@checker("The causal imbalance")
def check_causal_imbalance(answer) -> str:
    """Causal ring attention, contiguous layout, N = 16 (the chapter works N = 8 out): the
    busiest device's work over the mean (blocks the mask hides entirely are skipped)."""
    n = IMBALANCE_DEVICES
    work = causal_work(n, "contiguous")
    want = max(work) / (sum(work) / len(work))
    answer = as_number(answer, "the ratio")
    if np.isclose(answer, 16 / 9):
        raise Wrong("that is the ratio for N = 8 devices; this ring has 16.")
    if answer == n:
        raise Wrong("that is the busiest over the least busy device.", "Divide by the mean.")
    if answer == 2:
        raise Wrong("that is the ratio for a mask that halved every device's work evenly.",
                    "Count the blocks device i needs: i + 1.")
    expect_number(answer, want, rel=1e-3, hint="Device i attends to blocks 0 … i.")
    return f"{want:.3f} = 2N/(N+1): the step waits for the last device."


# Exercise 9.6 (design): a causal model, 32 heads, H = 4,096, S = 65,536, 16 devices of
# one NVLink domain, bf16; several schemes fit the budget and the time
DESIGN = {"sequence": 65536, "heads": 32, "hidden": 4096, "devices": 16,
          "budget": 32.5 * 2**30, "time": 4e-3, "system": "H100 (NVLink)"}
RINGS = ("ring", "usp")  # schemes whose blocks go round a ring: a causal mask needs balance


@checker("Choose a scheme and a layout")
def check_context_design(scheme, layout, gib) -> str:
    """A scheme (of SCHEMES) and layout (of LAYOUTS) for :data:`DESIGN` whose activations fit
    the budget, whose layer takes at most 4 ms (``compare.layer(..., causal=True)``) and whose
    causal work is balanced, and its activations in GiB (:func:`tpviz.context.compare.memory`).
    Several answers meet all three; the check names the reason an answer does not."""
    d = DESIGN
    if scheme not in SCHEMES or layout not in LAYOUTS:
        raise Wrong(f"choose scheme from {SCHEMES} and layout from {LAYOUTS}.")
    args = (d["sequence"], d["heads"], d["hidden"], d["devices"])
    need = memory(scheme, *args)
    gib = as_number(gib, "the activations in GiB")
    if not np.isclose(gib, need / 2**30, rtol=0.02):
        raise Wrong(f"your scheme's activations are not {gib:g} GiB.",
                    "Use tpviz.context.compare.memory(scheme, S, heads, H, N).")
    if need > d["budget"]:
        raise Wrong(f"{scheme} needs {need / 2**30:.1f} GiB per device: over the budget.")
    seconds = layer(scheme, *args, d["system"], causal=True).time_s
    if seconds > d["time"]:
        raise Wrong(f"{scheme} fits, but a layer takes {seconds * 1e3:.2f} ms: over 4 ms.",
                    "Which schemes hide their communication behind the attention?")
    if scheme in RINGS and layout == "contiguous":
        raise Wrong("the contiguous layout leaves the last device with 2N/(N+1) of the mean "
                    "work under the causal mask.", "Give each device early and late tokens.")
    if scheme not in RINGS and layout != "contiguous":
        raise Wrong(f"{scheme} sees the whole sequence after its exchange: the layout is the "
                    "plain one.")
    return (f"{scheme}, {layout}: {need / 2**30:.2f} GiB of activations per device (budget "
            f"32.5), {seconds * 1e3:.2f} ms per layer (target 4), the causal work balanced.")
