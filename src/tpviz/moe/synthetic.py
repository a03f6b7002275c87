"""Synthetic router logits for chapter 10's experiments: noise, plus a preference for the
first experts whose strength is the skew (the noise cached per size and seed)."""

from __future__ import annotations

import functools

import numpy as np

from tpviz.core import validate as check
from tpviz.core.kinds import Seed


def skewed_logits(tokens: int, experts: int, skew: float = 0.0, seed: Seed = 0) -> np.ndarray:
    """A synthetic router's logits: noise plus ``skew`` times a preference that falls linearly
    from expert 0 to expert E-1 (skew 0: balanced on average)."""
    tokens, experts = check.integer("tokens", tokens), check.integer("experts", experts)
    check.bounded("tokens × experts (the router's logits, 8 bytes each)", tokens * experts,
                  MAX_LOGITS, "Route fewer tokens (a sample of 4096 shows the same load).")
    return _noise(tokens, experts, seed) + check.number("skew", skew) * np.linspace(
        1, -1, experts)


MAX_LOGITS = 2**24  # 128 MiB of float64 logits


@functools.lru_cache(maxsize=16)
def _noise(tokens: int, experts: int, seed: int) -> np.ndarray:
    noise = np.random.default_rng(seed).standard_normal((tokens, experts))
    noise.flags.writeable = False  # shared by the calls that hit the cache
    return noise
