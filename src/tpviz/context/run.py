"""Sequence and context parallelism for real: each scheme inside ``jax.shard_map``.

Every scheme splits the sequence S over the mesh axis ``"context"`` (N devices, S/N tokens each;
``q[B, S, n_h, d_h]`` and ``k, v[B, S, n_kv, d_h]`` sharded as ``q[B, S_N, n_h, d_h]``):

- **ring** (Liu et al. 2023): :mod:`tpviz.context.ring`, the key/value block round the ring;
- **ulysses** (Jacobs et al. 2023): an all-to-all turns the sequence shards of q, k and v into
  head shards ``[B, S, n_h/N, d_h]``, each device attends over the whole sequence for its heads,
  and one more all-to-all turns the output back;
- **allgather** (Llama 3's context parallelism, Grattafiori et al. 2024): K and V all-gathered
  ``[2, B, S, n_kv, d_h]``, then the attention of the device's own queries;
- **usp** (Fang & Zhao 2024): on a mesh ``("ring", "ulysses")`` of r × u devices, Ulysses over
  the u devices of each group (they then hold S/r tokens for n_h/u heads), and ring attention
  over the r groups;
- **sequence** (Korthikanti et al. 2023): Megatron's attention block with its layer norm on
  sequence shards, an all-gather of the normed input before the column-parallel Q, K, V
  projections and a reduce-scatter after the row-parallel output projection
  (:func:`tpviz.megatron.column_parallel`, :func:`tpviz.megatron.row_parallel`).

The same functions with ``axis=None`` are the single-device references. Gradients come from
``jax.vjp`` of the whole ``shard_map``: JAX transposes each collective (an all-to-all into an
all-to-all, an all-gather into a reduce-scatter), except ring attention's, whose backward is
its own (:func:`tpviz.context.ring.backward`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.context.plan import AXIS, LAYOUTS, RING_AXIS, SCHEMES, ULYSSES_AXIS, order
from tpviz.context.ring import block_attention, positions, ring_attention
from tpviz.core.kinds import ArrayOf, AxisOf, Callback, JaxMesh, Keys, OneOf
from tpviz.megatron import column_parallel, layer_norm, row_parallel


def attention(q: ArrayOf("B S N D"), k: ArrayOf("B S M D"), v: ArrayOf("B S M D"),
              causal: bool = False):
    """Full softmax attention on one device (the reference): ``q[B, S, n_h, d_h]``, ``k, v[B, S,
    n_kv, d_h]`` (n_kv dividing n_h: grouped-query attention) to ``[B, S, n_h, d_h]``."""
    pos = jnp.arange(q.shape[1]) if causal else None
    return block_attention(q, k, v, pos, pos)[0]


# --- Ulysses, and usp ---------------------------------------------------------------------

def _to_heads(t, axis):  # [B, S/N, n, d] -> [B, S/N · u, n/u, d] over the u devices of axis
    return jax.lax.all_to_all(t, axis, split_axis=2, concat_axis=1, tiled=True)


def _to_sequence(t, axis):  # the inverse: [B, uS/N, n/u, d] -> [B, S/N, n, d]
    return jax.lax.all_to_all(t, axis, split_axis=1, concat_axis=2, tiled=True)


def ulysses_attention(q: ArrayOf("B S N D"), k: ArrayOf("B S M D"), v: ArrayOf("B S M D"),
                      axis: str = AXIS,
                      causal: bool = False):
    """One device's part of DeepSpeed-Ulysses (call inside ``shard_map``).

    All-to-all ``[B, S/N, n_h, d_h] → [B, S, n_h/N, d_h]`` for q (and ``n_kv`` heads for k and
    v), full attention over the sequence for these heads, all-to-all back."""
    o = attention(_to_heads(q, axis), _to_heads(k, axis), _to_heads(v, axis), causal)
    return _to_sequence(o, axis)  # [B, S/N, n_h, d_h]


def usp_attention(q: ArrayOf("B S N D"), k: ArrayOf("B S M D"), v: ArrayOf("B S M D"),
                  causal: bool = False,
                  layout: str = "contiguous",
                  recompute: bool = True):
    """One device's part of usp on the mesh ``("ring", "ulysses")`` (inside ``shard_map``):
    Ulysses' all-to-alls over ``"ulysses"`` give each device S/r tokens of n_h/u heads, ring
    attention over ``"ring"`` attends them to the whole sequence, and one all-to-all returns."""
    q, k, v = (_to_heads(t, ULYSSES_AXIS) for t in (q, k, v))  # [B, S/r, n/u, d_h]
    o = ring_attention(q, k, v, RING_AXIS, causal, layout, recompute)
    return _to_sequence(o, ULYSSES_AXIS)


# --- Llama 3's all-gather context parallelism ----------------------------------------------

def allgather_attention(q: ArrayOf("B S N D"), k: ArrayOf("B S M D"), v: ArrayOf("B S M D"),
                        axis: str = AXIS,
                        causal: bool = False,
                        layout: str = "contiguous"):
    """One device's part of all-gather context parallelism (inside ``shard_map``): one
    all-gather of ``kv[2, B, S/N, n_kv, d_h]`` along the sequence, then attention of the local
    queries over every key (masked by the positions of ``layout``)."""
    n, me, c = jax.lax.axis_size(axis), jax.lax.axis_index(axis), q.shape[1]
    kv = jax.lax.all_gather(jnp.stack([k, v]), axis, axis=2, tiled=True)  # [2, B, S, n_kv, d_h]
    if not causal:
        return block_attention(q, kv[0], kv[1])[0]
    every = jnp.concatenate([positions(j, n, c, layout) for j in range(n)])
    return block_attention(q, kv[0], kv[1], positions(me, n, c, layout), every)[0]


# --- Megatron sequence parallelism ---------------------------------------------------------

def sequence_parallel_block(x: ArrayOf("B S H"), params: Keys(*SPECS, dims=DIMS),
                            head_dim: int, axis: str | None = AXIS,
                            causal: bool = False, regather: bool = False):
    """``x + Attn(LN(x)) W_O`` with Megatron's sequence parallelism (inside ``shard_map``):
    ``x[B, S/N, H]``; layer norm on the sequence shard; all-gather along the sequence
    (Korthikanti's g); column-parallel Q, K, V for this device's n_h/N heads (and n_kv/N
    key/value heads) and row-parallel W_O (Megatron's layers without f and g); reduce-scatter of
    the partial sums along the sequence (ḡ). With ``axis=None`` and whole weights: the block on
    one device.

    ``regather``: what the backward keeps for dW_QKV. False: the gathered ``[B, S, H]`` (JAX's
    autodiff saves the matmul's input). True: the shard ``[B, S/N, H]``, all-gathered again in
    the backward (``jax.checkpoint`` around the gather and the projections), as Megatron-LM's
    linear layer does with sequence parallelism."""
    normed = layer_norm(x)  # [B, S/N, H]: on the sequence shard

    def project(normed, wq, wk, wv):
        if axis is not None:
            normed = jax.lax.all_gather(normed, axis, axis=1, tiled=True)  # [B, S, H]
        return column_parallel(normed, (wq, wk, wv))

    if regather:
        project = jax.checkpoint(project)  # keeps only its inputs: the shard and the weights
    b, s = x.shape[0], x.shape[1] * (1 if axis is None else jax.lax.axis_size(axis))
    q, k, v = (t.reshape(b, s, -1, head_dim)  # [B, S, n_h/N or n_kv/N, d_h]: this device's
               for t in project(normed, params["wq"], params["wk"], params["wv"]))
    o = attention(q, k, v, causal).reshape(b, s, -1)  # [B, S, n_h/N · d_h]
    partial = row_parallel(o, params["wo"])  # [B, S, H]: a partial sum per device
    if axis is not None:
        partial = jax.lax.psum_scatter(partial, axis, scatter_dimension=1, tiled=True)
    return x + partial  # [B, S/N, H]


SPECS = {"wq": P(None, AXIS), "wk": P(None, AXIS), "wv": P(None, AXIS), "wo": P(AXIS, None)}
DIMS = {"wq": "H Q", "wk": "H Q", "wv": "H Q", "wo": "Q H"}  # the weights' named dimensions


# --- programs ------------------------------------------------------------------------------

def program(scheme: OneOf(SCHEMES), mesh: JaxMesh, causal: bool = False,
            layout: OneOf(LAYOUTS) = "contiguous",
            head_dim: int = 0, axis: AxisOf() = AXIS, *, recompute: bool = True,
            regather: bool = False):
    """The scheme as a function of global arrays: ``fn(q, k, v)`` (``[B, S, n, d_h]``, sharded
    along S; for "usp" over both axes of ``mesh``), ``fn(x, params)`` for "sequence"."""
    seq = P(None, axis)
    if scheme == "sequence":
        specs = {name: P(*(axis if a else None for a in s)) for name, s in SPECS.items()}
        return jax.shard_map(
            lambda x, p: sequence_parallel_block(x, p, head_dim, axis, causal, regather),
            mesh=mesh, in_specs=(seq, specs), out_specs=seq)
    if scheme == "usp":
        seq = P(None, (RING_AXIS, ULYSSES_AXIS))
        return jax.shard_map(lambda q, k, v: usp_attention(q, k, v, causal, layout, recompute),
                             mesh=mesh, in_specs=(seq,) * 3, out_specs=seq)
    bodies = {"ring": lambda q, k, v: ring_attention(q, k, v, axis, causal, layout, recompute),
              "ulysses": lambda q, k, v: ulysses_attention(q, k, v, axis, causal),
              "allgather": lambda q, k, v: allgather_attention(q, k, v, axis, causal, layout)}
    return jax.shard_map(bodies[scheme], mesh=mesh, in_specs=(seq,) * 3, out_specs=seq)


def with_gradients(fn: Callback):
    """``(*args, ct) -> (fn(*args), gradients of ⟨fn(*args), ct⟩ w.r.t. every argument)``:
    the forward and backward pass in one program (no extra reduction for a loss)."""
    def both(*args):
        *inputs, ct = args
        out, pullback = jax.vjp(fn, *inputs)
        return out, pullback(ct)
    return both


def reference(scheme: str, causal: bool = False, head_dim: int = 0):
    """The single-device function the scheme must equal."""
    if scheme == "sequence":
        return lambda x, p: sequence_parallel_block(x, p, head_dim, None, causal)
    return lambda q, k, v: attention(q, k, v, causal)


def to_layout(t, n: int, layout: str, inverse: bool = False):
    """Reorder the sequence (axis 1) of a global array into ``layout`` over ``n`` devices (or
    back)."""
    if layout == "contiguous":
        return t
    ordered = order(t.shape[1], n, layout)
    if inverse:
        ordered = jnp.argsort(ordered)
    return jnp.take(jnp.asarray(t), ordered, axis=1)


def place(mesh, t, spec) -> jax.Array:
    return jax.device_put(t, NamedSharding(mesh, spec))
