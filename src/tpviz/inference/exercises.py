"""Checkers for the inference chapter: the cache of a token, decode's compute-bound batch,
speculative decoding, a paged cache's saving, and a serving design. The two build checkers
(a decode step split by heads; the cross-device log-sum-exp combine) are in
:mod:`tpviz.inference.builds`."""

from __future__ import annotations

import functools
import math

from tpviz.core import hardware as hw
from tpviz.core.exercises import (
    Wrong,
    as_integer,
    as_number,
    checker,
    expect_number,
    is_stub,
)
from tpviz.errors import TpvizError
from tpviz.inference.builds import check_heads_decode, check_lse_combine
from tpviz.inference.paged import simulate
from tpviz.inference.plan import decode
from tpviz.inference.serve import CHIP_HOUR, chip_counts, speculative

__all__ = ["DESIGN", "REQUESTS", "check_decode_batch", "check_draft_length",
           "check_heads_decode", "check_kv_per_token", "check_lse_combine",
           "check_paging_gain", "check_serving_design"]

#: Exercise 14.4: the final lengths (prompt and output, tokens) of 12 requests
REQUESTS = (37, 512, 1290, 17, 2048, 301, 64, 1000, 755, 129, 1600, 5)


@checker("The cache of a token")
def check_kv_per_token(answer) -> str:
    """Bytes of KV cache per token: 88 layers, 8 key/value heads of width 128, fp8."""
    want = 2 * 88 * 8 * 128
    got = as_number(answer)
    if got == want / 2:
        raise Wrong("that is the keys alone (or the values alone).", "Both are cached.")
    if got == want * 2:
        raise Wrong("that counts 2 bytes per value.", "fp8 is one byte.")
    if got == want * 8:
        raise Wrong("that counts a key/value head per query head.",
                    "Only the 8 key/value heads are cached.")
    expect_number(got, want, hint="Per token and layer: keys and values, each n_kv · d_h "
                  "values.")
    return f"{want:,} bytes: {want * 4096 / 2**20:,.0f} MiB for a 4,096-token sequence."


@checker("When decode turns compute-bound")
def check_decode_batch(answer) -> str:
    """The smallest whole batch whose decode matmuls are compute-bound on a TPU v6e with int4
    weights (0.5 byte) and bf16 FLOPs."""
    chip = hw.CHIPS["TPU v6e"]
    exact = chip.peak("bf16") * 0.5 / (2 * chip.hbm_bandwidth)
    got = as_integer(answer)
    hint = ("Each weight read (half a byte) is used for 2·B FLOPs: compare the FLOPs' time with "
            "the bytes' time.")
    if got in (math.ceil(exact * 4), math.ceil(exact * 2)):
        raise Wrong(f"{got} counts more bytes per weight than int4's half byte.", hint)
    if got == math.ceil(exact / 2):
        raise Wrong("that counts 1 FLOP per weight and sequence.", "A multiply-add is 2 FLOPs.")
    if got == math.floor(exact):
        raise Wrong(f"at B = {got} the matmuls are still (just) memory-bound.",
                    "Round up: the first whole batch past the ridge.")
    expect_number(got, math.ceil(exact), hint=hint)
    return (f"B = {math.ceil(exact)}: R·b_w/(2 W_hbm) = {exact:.1f}. With int4 weights the "
            "ridge comes 4 times sooner than in bf16.")


@checker("How far to speculate")
def check_draft_length(answer) -> str:
    """(γ, speed-up): the drafted tokens from 1 to 12 with the largest expected speed-up at
    ρ = 0.7 and κ = 0.1 (Leviathan et al.'s Theorem 3.8)."""
    if is_stub(answer):
        raise Wrong("give a pair (gamma, speedup).")
    if not isinstance(answer, tuple | list) or len(answer) != 2:
        raise Wrong("give a pair (gamma, speedup).")
    gamma, speedup = as_integer(answer[0], "gamma"), as_number(answer[1], "the speed-up")
    if not 1 <= gamma <= 12:
        raise Wrong(f"γ = {gamma}: choose γ from 1 to 12.")
    gains = {g: speculative(0.7, g, 0.1)[1] for g in range(1, 13)}
    best = max(gains, key=gains.get)
    # the pair is graded together: a speed-up that is not your γ's says nothing about γ
    if math.isclose(speedup, speculative(0.7, gamma, 0.0)[0], rel_tol=1e-3):
        raise Wrong("that is the expected tokens per target step, without the draft's cost.",
                    "Divide by the time of a round: γκ + 1 target steps.")
    expect_number(speedup, gains[gamma], what="the speed-up", rel=1e-3,
                  hint="Leviathan et al.'s expected speed-up for your γ, with ρ = 0.7 and "
                       "κ = 0.1.")
    if gamma != best:
        raise Wrong(f"that is the speed-up of γ = {gamma}, but another γ gives more.",
                    "Compute the speed-up for each γ from 1 to 12." if gamma < best else
                    "Every drafted token costs κ of a target step, and the later ones are "
                    "rarely accepted.")
    return f"γ = {best}: {gains[best]:.2f}× on average; γ = 12 would give {gains[12]:.2f}×."


@checker("What paging saves")
def check_paging_gain(answer) -> str:
    """Contiguous slots (2,048 per request) over paged slots (blocks of 16) for REQUESTS."""
    result = simulate(REQUESTS, 2048, 16)
    got = as_number(answer)
    if math.isclose(got, result.contiguous / result.tokens, rel_tol=1e-3):
        raise Wrong("that compares with the tokens stored, as if the paged cache wasted nothing.",
                    "Each request's last block is partly empty: count whole blocks.")
    if math.isclose(got, 1 / result.saving, rel_tol=1e-3):
        raise Wrong("that is the paged slots over the contiguous ones.", "Turn it over.")
    expect_number(got, result.saving, rel=1e-3, hint="Blocks per request: its length divided "
                  "by 16, rounded up.")
    return (f"{result.saving:.2f}×: the contiguous cache wastes {result.contiguous_waste:.0%}, "
            f"the paged one {result.paged_waste:.1%}.")


# Exercise 14.7: LLaMA-3 70B at S = 4,096, at most 30 ms per token, the cheapest per token
DESIGN = {"model": "LLaMA-3 70B", "context": 4096, "seconds": 0.030, "margin": 0.15,
          "dtypes": ("bf16", "int8"), "most_chips": 256}


@functools.cache
def cheapest() -> tuple[float, tuple]:
    """The cheapest configuration of DESIGN over every system, chip count and dtype. For each,
    the cost per token falls with the batch (the step's time grows slower than B), and both
    limits (HBM, latency) only tighten as B grows: the largest batch within both is the best,
    found by bisection."""
    d, best = DESIGN, (math.inf, ())

    def ok(system, chips, dtype, batch):
        s = decode(d["model"], system, chips, batch, d["context"], dtype)
        return s.fits and s.seconds <= d["seconds"]

    for system, price in CHIP_HOUR.items():
        for chips in chip_counts(system, d["most_chips"]):
            for dtype in d["dtypes"]:
                if not ok(system, chips, dtype, 1):
                    continue
                low, high = 1, 2**16  # ok(low), not ok(high)
                while high - low > 1:
                    mid = (low + high) // 2
                    low, high = (mid, high) if ok(system, chips, dtype, mid) else (low, mid)
                s = decode(d["model"], system, chips, low, d["context"], dtype)
                best = min(best, (s.cost_per_million(price), (system, chips, low, dtype)))
    return best


@checker("Serve LLaMA-3 70B under a latency target")
def check_serving_design(system, chips, batch, dtype, ms_per_token, dollars_per_million) -> str:
    """A system of CHIP_HOUR, chips, batch and dtype that serve DESIGN's model within its
    latency and cost at most ``margin`` above the cheapest; with the step's ms and $/M."""
    d = DESIGN
    if system not in CHIP_HOUR or dtype not in d["dtypes"]:
        raise Wrong(f"choose system from {tuple(CHIP_HOUR)} and dtype from {d['dtypes']}.")
    try:
        s = decode(d["model"], system, chips, batch, d["context"], dtype)
    except TpvizError as e:
        raise Wrong(f"that configuration cannot be priced: {e}") from None
    expect_number(ms_per_token, s.seconds * 1e3, what="your ms per token", rel=0.01,
                  hint="inference.decode(...).seconds, in ms.")
    cost = s.cost_per_million(CHIP_HOUR[system])
    expect_number(dollars_per_million, cost, what="your dollars per million tokens", rel=0.01,
                  hint="step.cost_per_million(serve.CHIP_HOUR[system]).")
    if not s.fits:
        raise Wrong(f"{s.held_bytes / 1e9:.1f} GB per chip: more than its "
                    f"{s.hbm_bytes / 1e9:.0f} GB of HBM.", "Fewer sequences, or more chips.")
    if s.seconds > d["seconds"]:
        raise Wrong(f"{s.seconds * 1e3:.1f} ms per token: over the 30 ms target.",
                    "A smaller batch, or more chips.")
    best, _ = cheapest()
    if cost > (1 + d["margin"]) * best:
        raise Wrong(f"${cost:.3f} per million tokens: it meets the target, but a configuration "
                    f"costs {1 - best / cost:.0%} less.", "Look for the largest batch that "
                    "still meets the target, on other chip counts, systems and dtypes.")
    return (f"{chips} × {system}, B = {batch}, {dtype}: {s.seconds * 1e3:.1f} ms per token, "
            f"${cost:.3f} per million tokens ({s.bound}-bound), within {d['margin']:.0%} of "
            f"the cheapest (${best:.3f}).")
