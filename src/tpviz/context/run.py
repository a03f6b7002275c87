"""Sequence and context parallelism for real: the three schemes inside ``jax.shard_map``.

Every scheme splits the sequence S over the mesh axis ``"context"`` (N devices, S/N tokens each;
``q, k, v: [B, S, n_h, d_h]`` sharded as ``q[B, S_N, n_h, d_h]``):

- **ring** (Liu et al. 2023): queries stay; the key/value block ``[2, B, S/N, n_h, d_h]`` goes
  round the ring with ``ppermute``, N - 1 times; each block's attention is merged into the
  running result by the online softmax (:func:`combine`, FlashAttention's running max and sum);
- **ulysses** (Jacobs et al. 2023): an all-to-all turns the sequence shards of q, k and v into
  head shards ``[B, S, n_h/N, d_h]``, each device attends over the whole sequence for its heads,
  and one more all-to-all turns the output back;
- **sequence** (Korthikanti et al. 2023): Megatron's attention block with its layer norm on
  sequence shards, an all-gather of the normed input before the column-parallel Q, K, V
  projections and a reduce-scatter after the row-parallel output projection
  (:func:`tpviz.megatron.column_parallel`, :func:`tpviz.megatron.row_parallel`).

The same functions with ``axis=None`` are the single-device references. Gradients come from
``jax.vjp`` of the whole ``shard_map``: JAX transposes each collective (a permute into the
reverse permute, an all-to-all into an all-to-all, an all-gather into a reduce-scatter).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.context.plan import AXIS, zigzag_order
from tpviz.core.kinds import ArrayOf, AxisOf, Callback, JaxMesh, Keys, Numbers
from tpviz.errors import ShardingError
from tpviz.megatron import column_parallel, layer_norm, row_parallel

MASKED = -1e30  # a finite "minus infinity": exp() of it is 0, and no NaN from (-inf) - (-inf)


# --- attention of one block, and the online-softmax combine ----------------------------------

def block_attention(q: ArrayOf("B Q N D"), k: ArrayOf("B K N D"), v: ArrayOf("B K N D"),
                    q_pos: ArrayOf("Q") | None = None, k_pos: ArrayOf("K") | None = None):
    """Softmax attention of the queries ``q[B, c_q, n, d]`` over one key/value block
    ``k, v[B, c_k, n, d]``: the normalised output ``o[B, c_q, n, d]`` and the log-sum-exp
    ``lse[B, c_q, n]`` of the scores. With positions given, a key attends only where
    ``k_pos <= q_pos`` (causal); a query that sees none of the block gets ``lse ≈ -1e30``."""
    s = jnp.einsum("bqnd,bknd->bnqk", q, k) / math.sqrt(q.shape[-1])  # [B, n, c_q, c_k]
    if q_pos is not None:
        s = jnp.where(k_pos[None, :] <= q_pos[:, None], s, MASKED)
    lse = jax.nn.logsumexp(s, axis=-1)  # [B, n, c_q]
    o = jnp.einsum("bnqk,bknd->bqnd", jnp.exp(s - lse[..., None]), v)
    return o, lse.transpose(0, 2, 1)  # o: [B, c_q, n, d], lse: [B, c_q, n]


def combine(o1: ArrayOf("... D"), lse1: Numbers, o2: ArrayOf("... D"), lse2: Numbers):
    """Merge the attention of the same queries over two key blocks (FlashAttention's online
    softmax): ``lse = log(e^lse1 + e^lse2)``, ``o = e^(lse1 - lse) o1 + e^(lse2 - lse) o2``."""
    if not (jnp.shape(o1) == jnp.shape(o2) and jnp.shape(lse1) == jnp.shape(lse2)
            == jnp.shape(o1)[:-1]):
        raise ShardingError(f"combine: o1 {jnp.shape(o1)} and o2 {jnp.shape(o2)} must have one "
                            f"shape [..., d], lse1 {jnp.shape(lse1)} and lse2 "
                            f"{jnp.shape(lse2)} that shape without its last axis.")
    lse = jnp.logaddexp(lse1, lse2)  # [B, c, n]
    return (o1 * jnp.exp(lse1 - lse)[..., None] + o2 * jnp.exp(lse2 - lse)[..., None]), lse


def attention(q: ArrayOf("B S N D"), k: ArrayOf("B S N D"), v: ArrayOf("B S N D"),
              causal: bool = False):
    """Full softmax attention on one device (the reference): ``[B, S, n_h, d_h]`` in and out."""
    pos = jnp.arange(q.shape[1]) if causal else None
    return block_attention(q, k, v, pos, pos)[0]


# --- ring attention ------------------------------------------------------------------------

def positions(me, n: int, chunk: int, layout: str):
    """Global positions of the S/N tokens a device holds: ``contiguous`` (device i holds block
    i) or ``zigzag`` (device i holds chunks i and 2N-1-i of 2N chunks of ``chunk`` tokens)."""
    if layout == "contiguous":
        return me * chunk + jnp.arange(chunk)
    half = chunk // 2
    return jnp.concatenate([me * half + jnp.arange(half), (2 * n - 1 - me) * half +
                            jnp.arange(half)])


def ring_attention(q: ArrayOf("B S N D"), k: ArrayOf("B S N D"), v: ArrayOf("B S N D"),
                   axis: str = AXIS, causal: bool = False,
                   layout: str = "contiguous"):
    """One device's part of ring attention (call inside ``shard_map``).

    ``q, k, v: [B, S/N, n_h, d_h]``, this device's tokens in ``layout``. Step s = 0 … N-1:
    attend to the key/value block held now, merge it by :func:`combine`, pass the block to
    the next device (``ppermute`` i → i+1; not after the last step: N - 1 permutes). With
    ``causal`` and the zigzag layout, every step after the first is half a block's work on every
    device: the queries attend the first chunk of an earlier device's block, or the second
    query chunk attends a later device's whole block (chosen by ``lax.cond``)."""
    n, me = jax.lax.axis_size(axis), jax.lax.axis_index(axis)
    c = q.shape[1]
    q_pos = positions(me, n, c, layout) if causal else None
    kv = jnp.stack([k, v])  # [2, B, S/N, n_h, d_h]: the block that travels
    o, lse = block_attention(q, k, v, q_pos, q_pos)  # step 0: this device's own block
    ring = [(i, (i + 1) % n) for i in range(n)]

    def step(carry, s):  # a scan over s = 1 ... N-1: a while loop of N - 1 trips
        kv, o, lse = carry
        kv = jax.lax.ppermute(kv, axis, ring)  # now the block of device (me - s) mod N
        src = (me - s) % n
        if causal and layout == "zigzag":
            o, lse = _zigzag_step(q, kv, o, lse, src, me)
        else:
            k_pos = positions(src, n, c, layout) if causal else None
            o, lse = combine(o, lse, *block_attention(q, kv[0], kv[1], q_pos, k_pos))
        return (kv, o, lse), None

    (_, o, _), _ = jax.lax.scan(step, (kv, o, lse), jnp.arange(1, n))
    return o


def _zigzag_step(q, kv, o, lse, src, me):
    """A later step of causal zigzag ring attention: half a block of work either way."""
    h = q.shape[1] // 2

    def earlier(o, lse):  # src < me: all my queries see src's first chunk, none of its second
        return combine(o, lse, *block_attention(q, kv[0, :, :h], kv[1, :, :h]))

    def later(o, lse):  # src > me: only my second chunk sees src's block, all of it
        o2, lse2 = combine(o[:, h:], lse[:, h:], *block_attention(q[:, h:], kv[0], kv[1]))
        return o.at[:, h:].set(o2), lse.at[:, h:].set(lse2)

    if isinstance(src, int) and isinstance(me, int):  # one device's own program (balance)
        return (earlier if src < me else later)(o, lse)
    return jax.lax.cond(src < me, earlier, later, o, lse)


# --- Ulysses -------------------------------------------------------------------------------

def ulysses_attention(q: ArrayOf("B S N D"), k: ArrayOf("B S N D"), v: ArrayOf("B S N D"),
                      axis: str = AXIS,
                      causal: bool = False):
    """One device's part of DeepSpeed-Ulysses (call inside ``shard_map``).

    All-to-all ``[B, S/N, n_h, d_h] → [B, S, n_h/N, d_h]`` for q, k and v (sequence shards to
    head shards), full attention over the sequence for n_h/N heads, all-to-all back."""
    def to_heads(t):  # [B, S/N, n_h, d_h] -> [B, S, n_h/N, d_h]
        return jax.lax.all_to_all(t, axis, split_axis=2, concat_axis=1, tiled=True)

    o = attention(to_heads(q), to_heads(k), to_heads(v), causal)  # [B, S, n_h/N, d_h]
    return jax.lax.all_to_all(o, axis, split_axis=1, concat_axis=2, tiled=True)


# --- Megatron sequence parallelism ---------------------------------------------------------

def sequence_parallel_block(x: ArrayOf("B S H"), params: Keys(*SPECS, dims=DIMS), head_dim: int,
                            axis: str | None = AXIS,
                            causal: bool = False):
    """``x + Attn(LN(x)) W_O`` with Megatron's sequence parallelism (inside ``shard_map``):
    ``x[B, S/N, H]``; layer norm on the sequence shard; all-gather along the sequence
    (Korthikanti's g); column-parallel Q, K, V for this device's n_h/N heads and row-parallel
    W_O (Megatron's layers without f and g); reduce-scatter of the partial sums along the
    sequence (ḡ). With ``axis=None`` and whole weights: the block on one device."""
    normed = layer_norm(x)  # [B, S/N, H]: on the sequence shard
    if axis is not None:
        normed = jax.lax.all_gather(normed, axis, axis=1, tiled=True)  # [B, S, H]
    b, s, _ = normed.shape
    q, k, v = (t.reshape(b, s, -1, head_dim)  # [B, S, n_h/N, d_h]: this device's heads
               for t in column_parallel(normed, (params["wq"], params["wk"], params["wv"])))
    o = attention(q, k, v, causal).reshape(b, s, -1)  # [B, S, n_h/N · d_h]
    partial = row_parallel(o, params["wo"])  # [B, S, H]: a partial sum per device
    if axis is not None:
        partial = jax.lax.psum_scatter(partial, axis, scatter_dimension=1, tiled=True)
    return x + partial  # [B, S/N, H]


SPECS = {"wq": P(None, AXIS), "wk": P(None, AXIS), "wv": P(None, AXIS), "wo": P(AXIS, None)}
DIMS = {"wq": "H Q", "wk": "H Q", "wv": "H Q", "wo": "Q H"}  # the weights' named dimensions


# --- programs ------------------------------------------------------------------------------

def program(scheme: str, mesh: JaxMesh, causal: bool = False, layout: str = "contiguous",
            head_dim: int = 0, axis: AxisOf() = AXIS):
    """The scheme as a function of global arrays: ``fn(q, k, v)`` for "ring" and "ulysses"
    (``[B, S, n_h, d_h]``, sharded along S), ``fn(x, params)`` for "sequence"."""
    seq = P(None, axis)
    if scheme == "sequence":
        specs = {name: P(*(axis if a else None for a in s)) for name, s in SPECS.items()}
        return jax.shard_map(lambda x, p: sequence_parallel_block(x, p, head_dim, axis, causal),
                             mesh=mesh, in_specs=(seq, specs), out_specs=seq)
    body = ((lambda q, k, v: ring_attention(q, k, v, axis, causal, layout)) if scheme == "ring"
            else (lambda q, k, v: ulysses_attention(q, k, v, axis, causal)))
    return jax.shard_map(body, mesh=mesh, in_specs=(seq, seq, seq), out_specs=seq)


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
    """Reorder the sequence (axis 1) of a global array into ``layout`` (or back)."""
    if layout == "contiguous":
        return t
    order = zigzag_order(t.shape[1], n)
    if inverse:
        order = jnp.argsort(order)
    return jnp.take(jnp.asarray(t), order, axis=1)


def place(mesh, t, spec) -> jax.Array:
    return jax.device_put(t, NamedSharding(mesh, spec))
