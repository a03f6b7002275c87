"""Serving a real model, priced: the fewest chips, the latency/throughput curve, disaggregated
prefill and decode, speculative decoding and Pope et al.'s weight-stationary layouts.

Every time comes from :func:`tpviz.inference.plan.decode` and :func:`~tpviz.inference.plan.
prefill`, which price on :mod:`tpviz.core.hardware`; nothing here keeps a bandwidth.

- **Disaggregation** (DistServe, zhong2024distserve; Splitwise, patel2024splitwise): prefill on
  its own chips, decode on others. Colocated, every prefill stops the decode batch: with B
  sequences of G generated tokens each, B/G new prompts arrive per decode step, and each token
  waits ``T_decode + (B/G) · T_prefill``. Apart, decode keeps ``T_decode``; each prompt's
  cache crosses the network once, and the prefill servers keep up with the decode servers when
  their ratio is ``T_prefill · B / (T_decode · G)`` (the Scaling Book's "P = 3G" question).
- **Speculative decoding** (leviathan2023fast): a draft model proposes γ tokens; the target
  checks them in one step of γ + 1 queries per sequence. With acceptance rate ρ the step yields
  ``(1 - ρ^(γ+1)) / (1 - ρ)`` tokens on average (their Eq. 1), and the speed-up is that over
  ``γ κ + 1`` target steps' time, κ the draft's step over the target's (their Theorem 3.8).
- **Weight-stationary layouts** (pope2023efficiently; the Scaling Book's Question 7): 1D keeps
  W_1[H, F_N] whole-row and gathers ``In[B, H]`` over all N chips, then reduce-scatters
  ``Out[B, H]``; 2D also splits H over X chips: an all-gather over the other axes (YZ) of
  ``In[B, H_X]``, an all-reduce over X of ``Tmp[B, F_YZ]``, a reduce-scatter over YZ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpviz.core import hardware as hw
from tpviz.core import validate
from tpviz.core.kinds import Any_, Index, KeywordsOf, Sizes
from tpviz.errors import ArgumentError
from tpviz.inference.plan import (
    bytes_of,
    check_chips,
    decode,
    kv_cache_bytes,
    model_of,
    prefill,
)

#: PaLM 540B (chowdhery2023palm, Table 1: 540.35B parameters): L 118, D 18432, 48 heads of
#: 256, F = 4D, multi-query attention (one key/value head), SwiGLU, no biases, input and output
#: embeddings shared, a 256k vocabulary. Its parallel layers are not modelled (two all-reduces
#: per layer are priced where Pope et al. need one). Kept here, beside the serving it prices,
#: rather than in ``core.hardware.MODELS``, whose every entry the training chapters list.
PALM_540B = hw.Model("PaLM 540B", 118, 18432, 48, seq=2048, vocab=256000, batch=2048,
                     ffn=73728, kv_heads=1, head_dim=256, gated=True, tied=True, bias=False,
                     norm="rms", learned_positions=False, source="chowdhery2023palm")

#: Google Cloud's on-demand dollars per chip-hour, as the Scaling Book quotes them (February
#: 2025, austin2025scaling "Serving LLaMA"): examples; set your own
CHIP_HOUR = {"TPU v5e": 1.2, "TPU v5p": 4.2, "H100": 10.8}


def chip_counts(system: str, most: int = 256) -> list[int]:
    """The chip counts ``system`` comes in, up to ``most``."""
    system = validate.choice("system", system, hw.SYSTEMS)
    if system in hw.TPUS:
        most = min(most, math.prod(hw.TPUS[system].pod))
        return [2**k for k in range(int(math.log2(most)) + 1)]
    return [n for n in (1, 2, 4, 8) if n <= most] + list(range(16, most + 1, 8))


def min_chips(model: Any_, system: str, dtype: str = "bf16", batch: int = 1, context: int = 0, *,
              kv_dtype: str | None = None) -> int:
    """The fewest chips of ``system`` that hold the weights and ``batch`` caches of ``context``
    tokens (one chip's HBM each).

    Raises:
        ArgumentError: no slice of the system holds them.
    """
    for n in chip_counts(system, 4096):
        if decode(model, system, n, batch, context, dtype, kv_dtype=kv_dtype).fits:
            return n
    raise ArgumentError(f"no {system} slice holds {model_of(model).name} with batch = {batch} "
                        f"and context = {context}; use fewer or shorter sequences.")


def max_batch(model: Any_, system: str, chips: int, context: Index, dtype: str = "bf16", *,
              kv_dtype: str | None = None) -> int:
    """The largest batch whose caches fit beside the weights (0: the weights alone do not)."""
    step = decode(model, system, chips, 1, context, dtype, kv_dtype=kv_dtype)
    free = step.hbm_bytes * step.chips - (step.held_bytes * step.chips
                                          - kv_cache_bytes(model, context + 1,
                                                           kv_dtype or dtype))
    return max(0, int(free // kv_cache_bytes(model, context + 1, kv_dtype or dtype)))


def curve(model: Any_, system: str, chips: int, context: Index, dtype: str = "bf16",
          batches: Sizes() = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
          **kw: KeywordsOf(decode)) -> list:
    """Decode steps at each batch that fits: the latency/throughput curve."""
    steps = [decode(model, system, chips, b, context, dtype, **kw) for b in batches]
    return [s for s in steps if s.fits]


@dataclass(frozen=True)
class Serving:
    """Prefill and decode of one workload, colocated or apart (seconds, per token)."""

    prefill_s: float  # one prompt on the prefill chips
    decode_s: float  # one decode step
    colocated_s: float  # a token's time when prefills interrupt the decode batch
    transfer_s: float  # moving one prompt's cache to the decode chips
    prefill_per_decode: float  # prefill servers per decode server that keep up


def transfer_s(system: str, chips: int, nbytes: float) -> float:
    """Seconds to send ``nbytes`` out of ``chips`` chips, each over its own share of the network
    between servers: a TPU chip's DCN, a GPU's NIC (``core.hardware``)."""
    system = validate.choice("system", system, hw.SYSTEMS)
    out = hw.TPUS[system].dcn if system in hw.TPUS else hw.GPUS[system].nic
    return validate.number("nbytes", nbytes, minimum=0) / (check_chips(system, chips) * out)


def disaggregate(model: Any_, system: str, prefill_chips: int, decode_chips: int, prompt: int,
                 generated: int, batch: int, dtype: str = "bf16") -> Serving:
    """A workload of ``prompt``-token prompts and ``generated`` tokens each, decoded ``batch``
    at a time: colocated (prefills on the decode chips, stopping the batch) or disaggregated."""
    g = validate.integer("generated", generated, maximum=10**7)
    prompt = validate.integer("prompt", prompt, maximum=10**7)
    step = decode(model, system, decode_chips, batch, prompt + g // 2, dtype)
    apart = prefill(model, system, prefill_chips, prompt, dtype).seconds
    there = prefill(model, system, decode_chips, prompt, dtype).seconds
    moved = transfer_s(system, prefill_chips, kv_cache_bytes(model, prompt, dtype))
    return Serving(apart, step.seconds, step.seconds + batch / g * there, moved,
                   apart * batch / (step.seconds * g))


def speculative(acceptance: float, draft_tokens: int, cost_ratio: float) -> tuple[float, float]:
    """Leviathan et al.: expected tokens per target step, ``(1 - ρ^(γ+1)) / (1 - ρ)``, and the
    expected speed-up, that over ``γ κ + 1``. ρ = ``acceptance``, γ = ``draft_tokens``, κ =
    ``cost_ratio`` (a draft step's time over a target step's)."""
    rho = validate.number("acceptance", acceptance, minimum=0)
    if rho > 1:
        raise ArgumentError(f"acceptance = {rho}: a rate from 0 to 1.")
    gamma = validate.integer("draft_tokens", draft_tokens, minimum=0, maximum=1000)
    kappa = validate.number("cost_ratio", cost_ratio, minimum=0)
    tokens = gamma + 1.0 if rho == 1 else (1 - rho ** (gamma + 1)) / (1 - rho)
    return tokens, tokens / (gamma * kappa + 1)


def speculative_priced(target: Any_, draft: Any_, system: str, chips: int, batch: int,
                       context: Index,
                       acceptance: float, draft_tokens: int, dtype: str = "bf16") -> dict:
    """Speculative decoding priced on the roofline: γ draft steps and one target step of γ + 1
    queries per sequence, against plain target steps. Returns κ, the formula's speed-up and
    the priced one (the verifying step costs more than a plain one once compute shows)."""
    plain = decode(target, system, chips, batch, context, dtype).seconds
    small = decode(draft, system, chips, batch, context, dtype).seconds
    verify = decode(target, system, chips, batch, context, dtype,
                    queries=draft_tokens + 1).seconds
    tokens, formula = speculative(acceptance, draft_tokens, small / plain)
    return {"kappa": small / plain, "formula": formula,
            "priced": tokens * plain / (draft_tokens * small + verify),
            "verify_over_plain": verify / plain}


# --- Pope et al.'s weight-stationary layouts -------------------------------------------------

def weight_stationary(model: Any_, system: str, mesh_shape: Sizes(), batch: int, layout: str = "1d",
                      dtype: str = "bf16") -> dict[str, float]:
    """Communication of one MLP per layer and decode step under ``layout`` ("1d" or "2d") on a
    TPU slice of ``mesh_shape``: each collective priced on that slice (latency included). 2D
    splits H over axis 0 (X) and F over the others (YZ)."""
    m = model_of(model)
    layout = validate.choice("layout", layout, ("1d", "2d"))
    system = validate.choice("system", system, hw.TPUS)
    net = hw.tpu(system, mesh_shape)
    b = validate.integer("batch", batch, maximum=10**7)
    act = 2 if bytes_of(dtype) >= 2 else 1
    every, rest = tuple(range(len(net.mesh_shape))), tuple(range(1, len(net.mesh_shape)))
    if layout == "1d":
        rows = b * m.hidden * act
        found = {"all-gather In[B, H]": net.price("all-gather", rows, every),
                 "reduce-scatter Out[B, H]": net.price("reduce-scatter", rows, every)}
    else:
        x, yz = net.mesh_shape[0], math.prod(net.mesh_shape[1:])
        part = b * m.hidden // x * act
        hidden = (2 if m.gated else 1) * b * m.F // yz * act  # gate and up projections
        found = {"all-gather In[B, H_X] over YZ": net.price("all-gather", part, rest),
                 "all-reduce Tmp[B, F_YZ] over X": net.price("all-reduce", hidden, (0,)),
                 "reduce-scatter Out[B, H_X] over YZ": net.price("reduce-scatter", part, rest)}
    return {k: p.seconds for k, p in found.items()}
