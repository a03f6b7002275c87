"""Ring attention (Liu et al. 2023) inside ``jax.shard_map``: its forward pass, with each
permute beside the attention of the block already held, and its backward pass, which
recomputes each block as the keys and values go round again and passes their gradients along.

Per device ``q, k, v: [B, S/N, n_h or n_kv, d_h]`` (its tokens in a layout of
:data:`tpviz.context.LAYOUTS`); the key/value block ``kv[2, B, S/N, n_kv, d_h]`` travels.

Forward, step s = 0 … N-1: the device holds the block of device (me - s) mod N. The permute that
brings the next block is issued *before* the attention of the one held, and nothing in that
attention reads its result, so the two can run at once (:func:`tpviz.context.loops.overlap`
reads this from the compiled loop body). N - 1 permutes.

Backward (``recompute``; the residuals are only q, k, v, the output o and the log-sum-exp lse):
with D = rowsum(dO ∘ O), each step recomputes the block's probabilities P = exp(QKᵀ/√d - lse)
and adds dQ += dS K/√d, where dS = P ∘ (dO Vᵀ - D); the block's dK = dSᵀ Q/√d and dV = Pᵀ dO are
added to the gradients that travel with it. The keys and values go round again (N - 1 permutes)
and their gradients follow them (N permutes, the last one home): the backward sends
(2N - 1)/(N - 1) times the forward's bytes. A step's gradients leave at the start of the next
step, beside its matmuls, not at the end of their own (where the permute would wait for the
matmuls that made them): every permute but the last is independent of the step's work. As in
the forward pass, :func:`tpviz.context.loops.overlap` reads this from the compiled loop body.
Autodiff of the forward instead (``recompute=False``) saves every block's probabilities: N
blocks of scores, not one.

Causal layouts, computed as a kernel with two tiles per block would (a quarter block the mask
hides entirely is skipped, one it cuts is computed in full): on its own block every layout
skips its early queries against its late keys (3 of 4 quarters); after it, contiguous skips a
block from a later device (``lax.cond``), zigzag (device i holds chunks i and 2N-1-i of 2N)
works on half a block each step, and striped (token t on device t mod N) skips the early half
of its queries against the late half of each block's keys, every step: 3 of 4 quarters.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from tpviz.core.kinds import ArrayOf, Numbers
from tpviz.errors import ShardingError

MASKED = -1e30  # a finite "minus infinity": exp() of it is 0, and no NaN from (-inf) - (-inf)


def expand(t, heads: int):
    """Key/value heads repeated for the query heads they serve (grouped-query attention):
    ``[B, c, n_kv, d]`` to ``[B, c, n_h, d]``, query head j using key/value head j // (n_h/n_kv)."""
    return t if t.shape[2] == heads else jnp.repeat(t, heads // t.shape[2], axis=2)


def block_attention(q: ArrayOf("B Q N D"), k: ArrayOf("B K M D"), v: ArrayOf("B K M D"),
                    q_pos: ArrayOf("Q") | None = None, k_pos: ArrayOf("K") | None = None):
    """Softmax attention of the queries ``q[B, c_q, n_h, d]`` over one key/value block
    ``k, v[B, c_k, n_kv, d]``: the normalised output ``o[B, c_q, n_h, d]`` and the log-sum-exp
    ``lse[B, c_q, n_h]`` of the scores. With positions given, a key attends only where
    ``k_pos <= q_pos`` (causal); a query that sees none of the block gets ``lse ≈ -1e30``."""
    n = q.shape[2]
    s = jnp.einsum("bqnd,bknd->bnqk", q, expand(k, n)) / math.sqrt(q.shape[-1])  # [B,n,cq,ck]
    if q_pos is not None:
        s = jnp.where(k_pos[None, :] <= q_pos[:, None], s, MASKED)
    lse = jax.nn.logsumexp(s, axis=-1)  # [B, n, c_q]
    o = jnp.einsum("bnqk,bknd->bqnd", jnp.exp(s - lse[..., None]), expand(v, n))
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


def positions(me, n: int, chunk: int, layout: str):
    """Global positions of the ``chunk`` = S/N tokens device ``me`` holds: ``contiguous`` (block
    me), ``zigzag`` (chunks me and 2N-1-me of 2N) or ``striped`` (me, me + N, me + 2N, ...)."""
    if layout == "contiguous":
        return me * chunk + jnp.arange(chunk)
    if layout == "striped":
        return me + n * jnp.arange(chunk)
    half = chunk // 2
    return jnp.concatenate([me * half + jnp.arange(half), (2 * n - 1 - me) * half +
                            jnp.arange(half)])


def pairs(layout: str, causal: bool, src, me, c: int, own: bool = False):
    """The (query slice, key slice) parts of the block of device ``src`` that device ``me``
    computes (static ``src`` and ``me``; ``own``: its own block; see the module text): ``None``
    for a contiguous block the mask hides entirely."""
    h, whole = c // 2, slice(0, c)
    if not causal:
        return [(whole, whole)]
    if layout == "striped" or own:  # the early queries never see the late keys
        return [(slice(0, h), slice(0, h)), (slice(h, c), whole)]
    if layout == "zigzag":
        return [(whole, slice(0, h))] if src < me else [(slice(h, c), whole)]
    return [(whole, whole)] if src < me else None


def _branches(layout: str, causal: bool, src, me, c: int, own: bool, fn, *args):
    """``fn(parts, *args)`` for the parts of this step, choosing by ``lax.cond`` when the device
    indices are traced (SPMD: zigzag and contiguous depend on whether src < me)."""
    if own or (isinstance(src, int) and isinstance(me, int)):
        return fn(pairs(layout, causal, src, me, c, own), *args)
    if not causal or layout == "striped":
        return fn(pairs(layout, causal, 0, 1, c), *args)
    return jax.lax.cond(src < me, lambda *a: fn(pairs(layout, True, 0, 1, c), *a),
                        lambda *a: fn(pairs(layout, True, 1, 0, c), *a), *args)


def step(q, kv, o, lse, src, me, n: int, layout: str = "contiguous", causal: bool = False,
         own: bool = False):
    """Merge the attention of this device's queries over the block of device ``src`` into
    ``(o, lse)`` (the parts :func:`pairs` names; ``own``: src is me)."""
    c = q.shape[1]
    q_pos, k_pos = positions(me, n, c, layout), positions(src, n, c, layout)

    def attend(parts, o, lse):
        for qs, ks in parts or ():
            part = block_attention(q[:, qs], kv[0, :, ks], kv[1, :, ks],
                                   q_pos[qs] if causal else None, k_pos[ks] if causal else None)
            o2, lse2 = combine(o[:, qs], lse[:, qs], *part)
            o, lse = o.at[:, qs].set(o2), lse.at[:, qs].set(lse2)
        return o, lse

    return _branches(layout, causal, src, me, c, own, attend, o, lse)


def _permute(x, axis: str, n: int):
    return jax.lax.ppermute(x, axis, [(i, (i + 1) % n) for i in range(n)])


def own_block(q, kv, me, n: int, layout: str, causal: bool):
    """``(o, lse)`` of this device's queries over its own block (merged into nothing)."""
    o, lse = jnp.zeros(q.shape, q.dtype), jnp.full(q.shape[:3], MASKED, q.dtype)
    return step(q, kv, o, lse, me, me, n, layout, causal, own=True)


def forward(q, k, v, axis: str, causal: bool, layout: str):
    """``(o, lse)`` of ring attention on this device (inside ``shard_map``): its own block,
    then N - 1 more, each next block's permute issued before the held block's attention."""
    n, me = jax.lax.axis_size(axis), jax.lax.axis_index(axis)
    kv = jnp.stack([k, v])  # [2, B, S/N, n_kv, d_h]: the block that travels
    if n == 1:
        return own_block(q, kv, me, n, layout, causal)
    arriving = _permute(kv, axis, n)  # block 1 travels while block 0 is attended
    o, lse = own_block(q, kv, me, n, layout, causal)

    def trip(carry, s):  # s = 1 ... N-2: a while loop of N - 2 trips
        kv, o, lse = carry
        arriving = _permute(kv, axis, n)  # the next block, beside this one's attention
        o, lse = step(q, kv, o, lse, (me - s) % n, me, n, layout, causal)
        return (arriving, o, lse), None

    (kv, o, lse), _ = jax.lax.scan(trip, (arriving, o, lse), jnp.arange(1, n - 1))
    return step(q, kv, o, lse, (me + 1) % n, me, n, layout, causal)  # s = N - 1


def block_gradients(q: ArrayOf("B Q N D"), k: ArrayOf("B K M D"), v: ArrayOf("B K M D"),
                    do: ArrayOf("B Q N D"), lse: ArrayOf("B Q N"), delta: ArrayOf("B Q N"),
                    q_pos: ArrayOf("Q") | None = None, k_pos: ArrayOf("K") | None = None):
    """The gradients of one block, from the whole row's ``lse`` and ``delta`` = rowsum(dO ∘ O)
    (both ``[B, c_q, n_h]``): ``(dq[B, c_q, n_h, d], dk, dv[B, c_k, n_kv, d])``."""
    n, m, scale = q.shape[2], k.shape[2], 1 / math.sqrt(q.shape[-1])
    ke, ve = expand(k, n), expand(v, n)
    s = jnp.einsum("bqnd,bknd->bnqk", q, ke) * scale  # [B, n, c_q, c_k]
    if q_pos is not None:
        s = jnp.where(k_pos[None, :] <= q_pos[:, None], s, MASKED)
    p = jnp.exp(s - lse.transpose(0, 2, 1)[..., None])  # recomputed probabilities
    dp = jnp.einsum("bqnd,bknd->bnqk", do, ve)
    ds = p * (dp - delta.transpose(0, 2, 1)[..., None])
    dq = jnp.einsum("bnqk,bknd->bqnd", ds, ke) * scale

    def grouped(t):  # [B, c_k, n_h, d] -> [B, c_k, n_kv, d]: sum over each group's heads
        return t.reshape(t.shape[0], t.shape[1], m, n // m, t.shape[3]).sum(3)

    dk = grouped(jnp.einsum("bnqk,bqnd->bknd", ds, q) * scale)
    dv = grouped(jnp.einsum("bnqk,bqnd->bknd", p, do))
    return dq, dk, dv


def _gradient_step(q, kv, do, lse, delta, dq, src, me, n, layout, causal, own=False):
    """``(dq, dkv)``: ``dq`` plus this block's share, and the block's own gradients ``dkv[2, B,
    S/N, n_kv, d_h]`` (added to those that travel by the caller, outside any ``lax.cond``, so
    that the matmuls do not wait for their arrival)."""
    c = q.shape[1]
    q_pos, k_pos = positions(me, n, c, layout), positions(src, n, c, layout)

    def grads(parts, dq, dkv):
        for qs, ks in parts or ():
            gq, gk, gv = block_gradients(q[:, qs], kv[0, :, ks], kv[1, :, ks], do[:, qs],
                                         lse[:, qs], delta[:, qs], q_pos[qs] if causal else None,
                                         k_pos[ks] if causal else None)
            dq = dq.at[:, qs].add(gq)
            dkv = dkv.at[:, :, ks].add(jnp.stack([gk, gv]))
        return dq, dkv

    return _branches(layout, causal, src, me, c, own, grads, dq, jnp.zeros_like(kv))


def backward(q, k, v, o, lse, do, axis: str, causal: bool, layout: str):
    """``(dq, dk, dv)`` by the ring again (inside ``shard_map``): see the module text. Each trip
    issues both of its permutes first, the next block and the gradients the previous trip
    finished, and adds what arrives only after its matmuls: no permute waits for the trip's
    matmuls, nor they for it (only the last permute, home, follows the work)."""
    n, me = jax.lax.axis_size(axis), jax.lax.axis_index(axis)
    delta = jnp.sum(do * o, axis=-1)  # D = rowsum(dO ∘ O): [B, S/N, n_h]
    kv = jnp.stack([k, v])
    dq, dkv = _gradient_step(q, kv, do, lse, delta, jnp.zeros_like(q), me, me, n, layout,
                             causal, True)  # dkv: the gradients of this device's block
    if n == 1:
        return dq, dkv[0], dkv[1]
    arriving = _permute(kv, axis, n)

    def trip(carry, s):  # s = 1 ... N-2; dkv: the gradients of block me - s + 1
        kv, dq, dkv = carry
        arriving, dkv = _permute(kv, axis, n), _permute(dkv, axis, n)  # dkv: of block me - s
        dq, own = _gradient_step(q, kv, do, lse, delta, dq, (me - s) % n, me, n, layout, causal)
        return (arriving, dq, dkv + own), None

    (kv, dq, dkv), _ = jax.lax.scan(trip, (arriving, dq, dkv), jnp.arange(1, n - 1))
    dkv = _permute(dkv, axis, n)  # the gradients of block me + 1, beside its last step
    dq, own = _gradient_step(q, kv, do, lse, delta, dq, (me + 1) % n, me, n, layout, causal)
    dkv = _permute(dkv + own, axis, n)  # the block of device me + 1: its gradients go home
    return dq, dkv[0], dkv[1]


def _make(axis: str, causal: bool, layout: str):
    @jax.custom_vjp
    def ring(q, k, v):
        return forward(q, k, v, axis, causal, layout)[0]

    def fwd(q, k, v):
        o, lse = forward(q, k, v, axis, causal, layout)
        return o, (q, k, v, o, lse)  # no block's scores are kept

    def bwd(res, do):
        return backward(*res, do, axis, causal, layout)

    ring.defvjp(fwd, bwd)
    return ring


def ring_attention(q: ArrayOf("B S N D"), k: ArrayOf("B S M D"), v: ArrayOf("B S M D"),
                   axis: str = "context", causal: bool = False,
                   layout: str = "contiguous", recompute: bool = True):
    """One device's part of ring attention (call inside ``shard_map``): ``o[B, S/N, n_h, d_h]``.

    Args:
        q, k, v: this device's tokens in ``layout`` (``k, v`` may have fewer heads: GQA).
        axis: the mesh axis of the ring.
        causal: mask each query's later keys (positions from ``layout``).
        layout: "contiguous", "zigzag" or "striped".
        recompute: the backward recomputes each block (Liu et al.; see the module text);
            False: autodiff's backward, which keeps every block's probabilities.
    """
    if not recompute:
        return forward(q, k, v, axis, causal, layout)[0]
    return _make(axis, causal, layout)(q, k, v)
