"""A decode step on the mesh, with its KV cache split three ways (inside ``jax.shard_map``).

The weights are split as in chapter 4 in all three: ``W_Q[H, (n_h d_h)_N]`` and
``W_O[(n_h d_h)_N, H]`` by heads, ``W_1, W_3[H, F_N]`` and ``W_2[F_N, H]``; the activations
``x[B, H]`` are whole on every device, and each layer ends its attention and its MLP with an
all-reduce (Megatron's g). What differs is the cache ``k, v[L, B, S, n_kv, d_h]``:

- **heads**: ``k[L, B, S, (n_kv)_N, d_h]``, each device its heads' keys and values, computed
  from its columns of ``W_K, W_V``. With fewer key/value heads than devices (GQA, n_kv < N),
  each key/value head is kept by the N/n_kv devices whose query heads use it: the cache is
  held N/n_kv times over. No communication besides the two all-reduces.
- **batch**: ``k[L, B_N, S, n_kv, d_h]`` (Pope et al.'s batch-sharded attention): the queries,
  computed for this device's heads, go to their sequences' device by an all-to-all
  ``q[B, (n_h)_N, d_h] → q[B_N, n_h, d_h]``; the output comes back by another.
- **sequence**: ``k[L, B, S_N, n_kv, d_h]`` (flash-decoding's split across devices): the
  queries are all-gathered; each device attends over its part of the context and gives
  ``(o_i, lse_i)``; :func:`combine_across` merges them with a max and a sum over the devices.

``W_K, W_V`` (small: n_kv d_h columns) are whole on every device for batch and sequence.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.core.kinds import ArrayOf, Keys, MeshWith, OneOf
from tpviz.inference.model import WEIGHTS, Config, attend, mlp, rms

AXIS = "model"
SCHEMES = ("heads", "batch", "sequence")
LAYER = ("norm1", "norm2", "wq", "wk", "wv", "wo", "w1", "w3", "w2")


def slots(config: Config, devices: int) -> int:
    """Key/value heads the heads scheme keeps in all: n_kv, or N when n_kv < N (replicas)."""
    return max(config.kv_heads, devices)


def combine_across(o: ArrayOf("B N D"), lse: ArrayOf("B N"), axis: str = AXIS):
    """Merge each device's attention over its part of the context (inside ``shard_map``).

    ``o[B, n_h, d_h]`` normalised and ``lse[B, n_h]`` on device i. With ``m = max_i lse_i``
    (an all-reduce with max) and weights ``w_i = e^(lse_i - m)``: ``o = Σ w_i o_i / Σ w_i``, the
    two sums in one all-reduce of ``[B, n_h, d_h + 1]``. Subtracting m keeps e^x finite."""
    m = jax.lax.pmax(lse, axis)  # [B, n_h]
    w = jnp.exp(lse - m)[..., None]  # [B, n_h, 1]
    both = jax.lax.psum(jnp.concatenate([o * w, w], axis=-1), axis)  # [B, n_h, d_h + 1]
    return both[..., :-1] / both[..., -1:]


def _heads(c: Config, n: int, h, layer: dict, k_cache, v_cache, pos):
    b = h.shape[0]
    q = (h @ layer["wq"]).reshape(b, -1, c.head_dim)  # [B, n_h/N, d_h]
    k = (h @ layer["wk"]).reshape(b, 1, -1, c.head_dim)  # [B, 1, slots/N, d_h]
    v = (h @ layer["wv"]).reshape(b, 1, -1, c.head_dim)
    k_all = jax.lax.dynamic_update_slice(k_cache, k, (0, pos, 0, 0))  # [B, S, slots/N, d_h]
    v_all = jax.lax.dynamic_update_slice(v_cache, v, (0, pos, 0, 0))
    o, _ = attend(q, k_all, v_all, jnp.arange(c.context) <= pos)  # [B, n_h/N, d_h]
    return o, k_all, v_all


def _batch(c: Config, n: int, h, layer: dict, k_cache, v_cache, pos, axis=AXIS):
    b, rows = h.shape[0], h.shape[0] // n
    q = (h @ layer["wq"]).reshape(b, -1, c.head_dim)  # [B, n_h/N, d_h]
    q = jax.lax.all_to_all(q, axis, 0, 1, tiled=True)  # [B/N, n_h, d_h]: my sequences
    mine = jax.lax.dynamic_slice_in_dim(h, jax.lax.axis_index(axis) * rows, rows)  # [B/N, H]
    k = (mine @ layer["wk"]).reshape(rows, 1, c.kv_heads, c.head_dim)  # [B/N, 1, n_kv, d_h]
    v = (mine @ layer["wv"]).reshape(rows, 1, c.kv_heads, c.head_dim)
    k_all = jax.lax.dynamic_update_slice(k_cache, k, (0, pos, 0, 0))  # [B/N, S, n_kv, d_h]
    v_all = jax.lax.dynamic_update_slice(v_cache, v, (0, pos, 0, 0))
    o, _ = attend(q, k_all, v_all, jnp.arange(c.context) <= pos)  # [B/N, n_h, d_h]
    return jax.lax.all_to_all(o, axis, 1, 0, tiled=True), k_all, v_all  # [B, n_h/N, d_h]


def _sequence(c: Config, n: int, h, layer: dict, k_cache, v_cache, pos, axis=AXIS):
    b, chunk = h.shape[0], c.context // n
    i = jax.lax.axis_index(axis)
    q = (h @ layer["wq"]).reshape(b, -1, c.head_dim)  # [B, n_h/N, d_h]
    q = jax.lax.all_gather(q, axis, axis=1, tiled=True)  # [B, n_h, d_h]
    k = (h @ layer["wk"]).reshape(b, 1, c.kv_heads, c.head_dim)  # [B, 1, n_kv, d_h]
    v = (h @ layer["wv"]).reshape(b, 1, c.kv_heads, c.head_dim)
    local = pos - i * chunk  # the new token's place in my part of the context
    mine = (local >= 0) & (local < chunk)
    at = (0, jnp.clip(local, 0, chunk - 1), 0, 0)
    k_all = jnp.where(mine, jax.lax.dynamic_update_slice(k_cache, k, at), k_cache)
    v_all = jnp.where(mine, jax.lax.dynamic_update_slice(v_cache, v, at), v_cache)
    valid = i * chunk + jnp.arange(chunk) <= pos  # [S/N]
    o, lse = attend(q, k_all, v_all, valid)  # [B, n_h, d_h] over my part only
    o = combine_across(o, lse, axis)  # [B, n_h, d_h] over the whole context
    heads = c.heads // n
    return jax.lax.dynamic_slice_in_dim(o, i * heads, heads, axis=1), k_all, v_all


ATTENTION = {"heads": _heads, "batch": _batch, "sequence": _sequence}


def step_body(scheme: OneOf(SCHEMES), config: Config, devices: int, axis: str = AXIS):
    """The per-device decode step of ``scheme``: ``(params, cache, tokens, pos) -> (logits,
    cache)``, params and cache this device's blocks (see the module text)."""
    c, attention = config, ATTENTION[scheme]

    def body(params, cache, tokens, pos):
        x = params["embed"][tokens] + params["pos"][pos]  # [B, H], whole on every device
        ks, vs = [], []
        for i in range(c.layers):
            layer = {name: params[name][i] for name in LAYER}
            o, k_all, v_all = attention(c, devices, rms(x, layer["norm1"]), layer,
                                        cache["k"][i], cache["v"][i], pos)
            b = o.shape[0]
            x = x + jax.lax.psum(o.reshape(b, -1) @ layer["wo"], axis)  # g: [B, H]
            part = mlp(rms(x, layer["norm2"]), layer["w1"], layer["w3"], layer["w2"])
            x = x + jax.lax.psum(part, axis)  # g: [B, H]
            ks.append(k_all)
            vs.append(v_all)
        logits = rms(x, params["final"]) @ params["out"]  # [B, V]
        return logits, {"k": jnp.stack(ks), "v": jnp.stack(vs)}

    return body


def specs(scheme: str, axis: str = AXIS) -> tuple[dict, dict]:
    """Partition specs of the weights and of the cache under ``scheme``."""
    split_kv = scheme == "heads"
    w = {"embed": P(), "pos": P(), "final": P(), "out": P(), "norm1": P(), "norm2": P(),
         "wq": P(None, None, axis), "wo": P(None, axis, None), "w1": P(None, None, axis),
         "w3": P(None, None, axis), "w2": P(None, axis, None),
         "wk": P(None, None, axis) if split_kv else P(), "wv": P(None, None, axis)
         if split_kv else P()}
    where = {"heads": P(None, None, None, axis), "batch": P(None, axis),
             "sequence": P(None, None, axis)}[scheme]
    return w, {"k": where, "v": where}


def expand(params: dict, cache: dict, config: Config, devices: int) -> tuple[dict, dict]:
    """For the heads scheme with n_kv < N: each key/value head repeated N/n_kv times (in its
    weights' columns and in the cache), so that device i holds the head its queries use."""
    r = slots(config, devices) // config.kv_heads
    if r == 1:
        return params, cache
    c = config
    out = dict(params)
    for name in ("wk", "wv"):
        w = params[name].reshape(c.layers, c.hidden, c.kv_heads, c.head_dim)
        out[name] = jnp.repeat(w, r, axis=2).reshape(c.layers, c.hidden, -1)
    return out, {k: jnp.repeat(v, r, axis=3) for k, v in cache.items()}


def place(scheme: OneOf(SCHEMES), mesh: MeshWith(AXIS), params: Keys(*WEIGHTS),
          cache: Keys("k", "v"), config: Config
          ) -> tuple[dict, dict]:
    """The weights and cache on the mesh, split as ``scheme`` says."""
    n = mesh.shape[AXIS]
    if scheme == "heads":
        params, cache = expand(params, cache, config, n)
    w, kv = specs(scheme)
    return ({k: jax.device_put(v, NamedSharding(mesh, w[k])) for k, v in params.items()},
            {k: jax.device_put(v, NamedSharding(mesh, kv[k])) for k, v in cache.items()})


def program(scheme: OneOf(SCHEMES), mesh: MeshWith(AXIS), config: Config):
    """The jitted sharded step ``(params, cache, tokens, pos) -> (logits, cache)``; the cache
    is donated, so the step writes it in place."""
    w, kv = specs(scheme)
    body = step_body(scheme, config, mesh.shape[AXIS])
    sharded = jax.shard_map(body, mesh=mesh, in_specs=(w, kv, P(), P()),
                            out_specs=(P(), kv))
    return jax.jit(sharded, donate_argnums=(1,))
