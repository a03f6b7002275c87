"""A small decoder-only transformer and its single-device decoding: the reference every sharded
decode step must equal.

LLaMA's shape in miniature: token and learned position embeddings, L layers of RMS norm,
grouped-query attention (n_h query heads, n_kv key/value heads of width d_h; query head j uses
key/value head ``j // (n_h / n_kv)``), RMS norm and a SwiGLU MLP (W_1, W_3 gate and up, W_2
down), a final norm and an output matrix. Float32 throughout, so that the sharded programs can
be compared to within rounding.

The **KV cache** is ``{"k": [L, B, S, n_kv, d_h], "v": …}`` with S the longest context. A decode
step writes the new token's keys and values at position ``pos`` and attends over positions
``0 … pos``. :func:`prefill` writes a whole prompt in one pass (causal attention); its cache
equals the one :func:`decode_step` writes token by token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from tpviz.core.kinds import ArrayOf, Callback, Index, Keys, Numbers, Of, Size
from tpviz.errors import ArgumentError, ArgumentTypeError

MASKED = -1e30  # a finite "minus infinity": exp() of it is 0, and no NaN from (-inf) - (-inf)
WEIGHTS = ("embed", "pos", "norm1", "norm2", "wq", "wk", "wv", "wo", "w1", "w3", "w2", "final",
           "out")  # init's


@dataclass(frozen=True)
class Config:
    """Sizes of the small transformer (defaults: the chapter's)."""

    layers: int = 2
    hidden: int = 64
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 8
    ffn: int = 128
    vocab: int = 128
    batch: int = 8
    context: int = 32  # S: the cache's length
    prompt: int = 16

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    def cache_bytes(self) -> int:
        """Bytes of the whole cache (float32)."""
        return 2 * self.layers * self.batch * self.context * self.kv_heads * self.head_dim * 4


def init(config: Config, seed: int = 0) -> dict:
    """Seeded float32 weights: ``embed[V, H]``, ``pos[S, H]``, per layer (stacked on a leading
    L axis) ``norm1, norm2[H]``, ``wq[H, n_h d_h]``, ``wk, wv[H, n_kv d_h]``, ``wo[n_h d_h, H]``,
    ``w1, w3[H, F]``, ``w2[F, H]``; ``final[H]`` and ``out[H, V]``."""
    c, rng = config, np.random.default_rng(seed)

    def w(*shape, fan):
        return (rng.standard_normal(shape) / math.sqrt(fan)).astype(np.float32)

    q, kv, L = c.heads * c.head_dim, c.kv_heads * c.head_dim, c.layers
    return {"embed": w(c.vocab, c.hidden, fan=1), "pos": w(c.context, c.hidden, fan=4),
            "norm1": 1 + w(L, c.hidden, fan=100), "norm2": 1 + w(L, c.hidden, fan=100),
            "wq": w(L, c.hidden, q, fan=c.hidden), "wk": w(L, c.hidden, kv, fan=c.hidden),
            "wv": w(L, c.hidden, kv, fan=c.hidden), "wo": w(L, q, c.hidden, fan=q),
            "w1": w(L, c.hidden, c.ffn, fan=c.hidden), "w3": w(L, c.hidden, c.ffn, fan=c.hidden),
            "w2": w(L, c.ffn, c.hidden, fan=c.ffn), "final": 1 + w(c.hidden, fan=100),
            "out": w(c.hidden, c.vocab, fan=c.hidden)}


def empty_cache(config: Config) -> dict:
    c = config
    shape = (c.layers, c.batch, c.context, c.kv_heads, c.head_dim)
    return {"k": np.zeros(shape, np.float32), "v": np.zeros(shape, np.float32)}


def rms(x: ArrayOf("... H"), weight: ArrayOf("H")):
    """RMS norm over the last axis."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * weight


def mlp(h: ArrayOf("... H"), w1: ArrayOf("H F"), w3: ArrayOf("H F"), w2: ArrayOf("F H")):
    """SwiGLU: ``(silu(h W_1) ⊙ h W_3) W_2`` (with W_1, W_3 column blocks and W_2 a row block
    inside tensor parallelism: a partial sum)."""
    return (jax.nn.silu(h @ w1) * (h @ w3)) @ w2


def attend(q: ArrayOf("B N D"), k: ArrayOf("B S M D"), v: ArrayOf("B S M D"),
           valid: ArrayOf("... S")):
    """Grouped-query attention of one new token per sequence over a block of cached positions.

    ``q[B, n_h, d_h]``; ``k, v[B, s, m, d_h]`` with ``m`` key/value heads (n_h a multiple of
    m); ``valid[s]`` (or ``[B, s]``) marks the positions to attend. Returns the normalised
    output ``o[B, n_h, d_h]`` and the log-sum-exp ``lse[B, n_h]`` of the scores: two blocks'
    results combine exactly (chapter 9's online softmax)."""
    b, n, d = q.shape
    m = k.shape[2]
    g = q.reshape(b, m, n // m, d)  # [B, m, group, d_h]
    s = jnp.einsum("bmgd,bsmd->bmgs", g, k) / math.sqrt(d)  # [B, m, group, s]
    mask = valid[:, None, None, :] if valid.ndim == 2 else valid[None, None, None, :]
    s = jnp.where(mask, s, MASKED)
    lse = jax.nn.logsumexp(s, axis=-1)  # [B, m, group]
    o = jnp.einsum("bmgs,bsmd->bmgd", jnp.exp(s - lse[..., None]), v)
    return o.reshape(b, n, d), lse.reshape(b, n)


def decode_step(params: Keys(*WEIGHTS), cache: Keys("k", "v"), tokens: ArrayOf("B", integer=True),
                pos: Of(Index, ArrayOf(0, integer=True)), config: Config):
    """One token for each of B sequences on one device: ``tokens[B]`` at position ``pos``
    (a scalar). Returns the logits ``[B, V]`` and the cache with this token's keys and
    values written at ``pos``."""
    c = config
    try:
        known = float(pos)
    except Exception:  # traced inside jax.jit: its value is unknown here
        known = None
    if known is not None and not 0 <= known < c.context:
        raise ArgumentError(f"pos = {pos!r} is not a position of the context, an integer 0 to "
                            f"{c.context - 1}.")
    x = params["embed"][tokens] + params["pos"][pos]  # [B, H]
    ks, vs = [], []
    valid = jnp.arange(c.context) <= pos  # [S]
    for layer in range(c.layers):
        p = {name: params[name][layer] for name in ("norm1", "norm2", "wq", "wk", "wv", "wo",
                                                      "w1", "w3", "w2")}
        h = rms(x, p["norm1"])
        q = (h @ p["wq"]).reshape(c.batch, c.heads, c.head_dim)  # [B, n_h, d_h]
        k = (h @ p["wk"]).reshape(c.batch, 1, c.kv_heads, c.head_dim)  # [B, 1, n_kv, d_h]
        v = (h @ p["wv"]).reshape(c.batch, 1, c.kv_heads, c.head_dim)
        k_all = jax.lax.dynamic_update_slice(cache["k"][layer], k, (0, pos, 0, 0))
        v_all = jax.lax.dynamic_update_slice(cache["v"][layer], v, (0, pos, 0, 0))
        o, _ = attend(q, k_all, v_all, valid)  # [B, n_h, d_h]
        x = x + o.reshape(c.batch, -1) @ p["wo"]
        x = x + mlp(rms(x, p["norm2"]), p["w1"], p["w3"], p["w2"])
        ks.append(k_all)
        vs.append(v_all)
    logits = rms(x, params["final"]) @ params["out"]  # [B, V]
    return logits, {"k": jnp.stack(ks), "v": jnp.stack(vs)}


def prefill(params: Keys(*WEIGHTS), prompt: ArrayOf("B T", integer=True), config: Config):
    """The prompt ``[B, P]`` in one pass with causal attention: the logits of its last token
    ``[B, V]`` and the cache with positions ``0 … P-1`` written (the rest zero)."""
    c = config
    b, n = prompt.shape
    x = params["embed"][prompt] + params["pos"][:n]  # [B, P, H]
    causal = jnp.arange(n)[None, :] <= jnp.arange(n)[:, None]  # [P (query), P (key)]
    ks, vs = [], []
    for layer in range(c.layers):
        p = {name: params[name][layer] for name in ("norm1", "norm2", "wq", "wk", "wv", "wo",
                                                      "w1", "w3", "w2")}
        h = rms(x, p["norm1"])
        q = (h @ p["wq"]).reshape(b, n, c.kv_heads, c.group, c.head_dim)
        k = (h @ p["wk"]).reshape(b, n, c.kv_heads, c.head_dim)
        v = (h @ p["wv"]).reshape(b, n, c.kv_heads, c.head_dim)
        s = jnp.einsum("bqmgd,bkmd->bmgqk", q, k) / math.sqrt(c.head_dim)
        a = jax.nn.softmax(jnp.where(causal, s, MASKED), axis=-1)
        o = jnp.einsum("bmgqk,bkmd->bqmgd", a, v).reshape(b, n, -1)
        x = x + o @ p["wo"]
        x = x + mlp(rms(x, p["norm2"]), p["w1"], p["w3"], p["w2"])
        pad = ((0, 0), (0, c.context - n), (0, 0), (0, 0))
        ks.append(jnp.pad(k, pad))
        vs.append(jnp.pad(v, pad))
    logits = rms(x[:, -1], params["final"]) @ params["out"]
    return logits, {"k": jnp.stack(ks), "v": jnp.stack(vs)}


def prompt_tokens(config: Config, seed: int = 0) -> np.ndarray:
    """A seeded prompt ``int32[B, P]``."""
    rng = np.random.default_rng(seed + 1)
    return rng.integers(0, config.vocab, (config.batch, config.prompt)).astype(np.int32)


def generate(step: Callback, params: Keys(*WEIGHTS), cache: Keys("k", "v"), tokens: Numbers,
             start: Index, steps: Size(4096, "each step runs the model")):
    """Greedy decoding: ``steps`` calls of ``step(params, cache, tokens, pos)`` from position
    ``start``. Returns the logits of each step and the tokens chosen, as host arrays."""
    logits, chosen = [], []
    for i in range(steps):
        result = step(params, cache, tokens, np.int32(start + i))
        if not isinstance(result, tuple) or len(result) != 2:
            raise ArgumentTypeError(f"step must return (logits, cache), as decode_step does; "
                                    f"it returned {type(result).__name__}.")
        out, cache = result
        tokens = jnp.argmax(out, axis=-1).astype(jnp.int32)
        logits.append(out)
        chosen.append(tokens)
    return logits, chosen, cache
