"""Chapter 9's build checkers on the harness: ring attention (9.4) and DeepSpeed-Ulysses (9.7)
in shard_map, on 4, 8 and 2 devices at several sizes. A non-ring (N - 1 permutes straight from
the original block) and "gather every block, then one softmax" fail, by their collectives and
by the memory they hold; the book's solutions pass."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes

import tpviz
from tpviz import context
from tpviz.core import exercises as framework
from tpviz.core import harness

ex = tpviz.exercises


# --- 9.4 the ring -----------------------------------------------------------------------------

def ring(q, k, v):  # the book's solution
    n = jax.lax.axis_size("context")
    o, lse = context.block_attention(q, k, v)
    kv = jnp.stack([k, v])
    for _ in range(n - 1):
        kv = jax.lax.ppermute(kv, "context", [(i, (i + 1) % n) for i in range(n)])
        o, lse = context.combine(o, lse, *context.block_attention(q, kv[0], kv[1]))
    return o


def _backwards(q, k, v):  # the same ring the other way round: right too
    n = jax.lax.axis_size("context")
    o, lse = context.block_attention(q, k, v)
    kv = jnp.stack([k, v])
    for _ in range(n - 1):
        kv = jax.lax.ppermute(kv, "context", [(i, (i - 1) % n) for i in range(n)])
        o, lse = context.combine(o, lse, *context.block_attention(q, kv[0], kv[1]))
    return o


def _not_a_ring(q, k, v):  # N - 1 permutes, each straight from the original block
    n = jax.lax.axis_size("context")
    o, lse = context.block_attention(q, k, v)
    kv = jnp.stack([k, v])
    for s in range(1, n):
        got = jax.lax.ppermute(kv, "context", [(i, (i + s) % n) for i in range(n)])
        o, lse = context.combine(o, lse, *context.block_attention(q, got[0], got[1]))
    return o


def _gather(q, k, v):  # every block gathered, then one softmax: no online combine
    k, v = (jax.lax.all_gather(t, "context", axis=1, tiled=True) for t in (k, v))
    return context.block_attention(q, k, v)[0]


def _separate(q, k, v):  # keys and values in separate permutes: twice the messages
    n = jax.lax.axis_size("context")
    o, lse = context.block_attention(q, k, v)
    ring_ = [(i, (i + 1) % n) for i in range(n)]
    for _ in range(n - 1):
        k, v = jax.lax.ppermute(k, "context", ring_), jax.lax.ppermute(v, "context", ring_)
        o, lse = context.combine(o, lse, *context.block_attention(q, k, v))
    return o


def _four(q, k, v):  # written for the chapter's 4 devices
    o, lse = context.block_attention(q, k, v)
    kv = jnp.stack([k, v])
    for _ in range(3):
        kv = jax.lax.ppermute(kv, "context", [(i, (i + 1) % 4) for i in range(4)])
        o, lse = context.combine(o, lse, *context.block_attention(q, kv[0], kv[1]))
    return o


def _wasteful(q, k, v):  # attend, then pass on, N times: the last permute is wasted
    n = jax.lax.axis_size("context")
    kv, o, lse = jnp.stack([k, v]), None, None
    for _ in range(n):
        block = context.block_attention(q, kv[0], kv[1])
        o, lse = block if o is None else context.combine(o, lse, *block)
        kv = jax.lax.ppermute(kv, "context", [(i, (i + 1) % n) for i in range(n)])
    return o + 0 * kv[0, :, :, :, :1]  # keep the last permute alive


RING_WRONG = {
    "library": (lambda q, k, v: context.ring_attention(q, k, v),
                r"write what `tpviz\.context\.ring\.ring_attention`"),
    "not a ring": (_not_a_ring, "2 steps round the ring at once"),
    "gather, then one softmax": (_gather, "all-gather .* does not need"),
    "keys and values apart": (_separate, "collective-permute"),
    "four devices": (_four, "right on 4 devices .* but on 8 devices"),
    "one permute too many": (_wasteful, "4 collective-permutes where the exercise needs 3"),
    "no combine": (lambda q, k, v: context.block_attention(q, k, v)[0], "wrong values"),
}


def test_ring_solution_passes_both_ways(capsys):
    ex.check_ring_step(ring)
    out = capsys.readouterr().out  # [2, 1, 12, 2, 8] float32: 1,536 bytes, 3 permutes on 4
    assert "✓" in out and "3 collective-permutes along 'context' of 1,536 bytes each" in out
    passes(ex.check_ring_step, _backwards, capsys=capsys)


@pytest.mark.parametrize("name", sorted(RING_WRONG))
def test_ring_rejects_wrong_programs(name):
    wrong, words = RING_WRONG[name]
    fails(ex.check_ring_step, wrong, words=words)


def test_gathering_every_block_also_fails_on_memory():
    # without the collectives' check, the memory it holds names the mistake
    from tpviz.context.builds import RING

    lenient = dataclasses.replace(RING, collectives=None, extra=None)
    with pytest.raises(framework.Wrong, match=r"spans the whole sequence of 48 tokens"):
        harness.grade(_gather, lenient)
    harness.grade(ring, lenient)  # the ring itself passes the memory check


# --- 9.7 Ulysses --------------------------------------------------------------------------------

def ulysses(q, k, v):  # the book's solution: sequence shards to head shards and back
    def to_heads(t):  # [B, S/N, n_h, d_h] -> [B, S, n_h/N, d_h]
        return jax.lax.all_to_all(t, "context", split_axis=2, concat_axis=1, tiled=True)

    o = context.attention(to_heads(q), to_heads(k), to_heads(v))
    return jax.lax.all_to_all(o, "context", split_axis=1, concat_axis=2, tiled=True)


def _stacked(q, k, v):  # q, k and v stacked into one exchange: right too
    qkv = jax.lax.all_to_all(jnp.stack([q, k, v]), "context", split_axis=3, concat_axis=2,
                             tiled=True)
    o = context.attention(qkv[0], qkv[1], qkv[2])
    return jax.lax.all_to_all(o, "context", split_axis=1, concat_axis=2, tiled=True)


def _gathered(q, k, v):  # the whole sequence gathered: every head on every device
    k, v = (jax.lax.all_gather(t, "context", axis=1, tiled=True) for t in (k, v))
    return context.block_attention(q, k, v)[0]


def _four_heads(q, k, v):  # the heads split in 4 by hand: the chapter's 4 devices
    def to_heads(t):
        b, c, n, d = t.shape
        return jax.lax.all_to_all(t.reshape(b, c, 4, n // 4, d), "context", 2, 1,
                                  tiled=True).reshape(b, 4 * c, n // 4, d)

    o = context.attention(to_heads(q), to_heads(k), to_heads(v))
    return jax.lax.all_to_all(o, "context", 1, 2, tiled=True)


def _summed(q, k, v):  # each device's heads computed, then a sum over the devices
    n, me = jax.lax.axis_size("context"), jax.lax.axis_index("context")
    qs, ks, vs = (jax.lax.all_gather(t, "context", axis=1, tiled=True) for t in (q, k, v))
    o = context.attention(qs, ks, vs)
    c = q.shape[1]
    return jax.lax.dynamic_slice_in_dim(jax.lax.psum(o / n, "context"), me * c, c, axis=1)


ULYSSES_WRONG = {
    "library": (lambda q, k, v: context.ulysses_attention(q, k, v),
                r"write what `tpviz\.context\.run\.ulysses_attention`"),
    "gathered": (_gathered, "all-gather along"),
    "summed": (_summed, "all-gather along|all-reduce along"),
    "no way back": (lambda q, k, v: context.attention(*(jax.lax.all_to_all(
        t, "context", 2, 1, tiled=True) for t in (q, k, v))), "block of shape"),
    "heads and sequence swapped": (lambda q, k, v: jax.lax.all_to_all(context.attention(*(
        jax.lax.all_to_all(t, "context", 1, 2, tiled=True) for t in (q, k, v))), "context", 2,
        1, tiled=True), "wrong values|block of shape|raised"),
    "four devices": (_four_heads, "right on 4 devices .* but on 8 devices|raised"),
}


def test_ulysses_solution_passes(capsys):
    ex.check_ulysses(ulysses)
    out = capsys.readouterr().out  # [1, 8, 8, 4] float32 per device: 1,024 bytes, 4 of them
    assert "✓" in out and "4 all-to-alls along 'context' of 1,024 bytes each" in out
    passes(ex.check_ulysses, _stacked, capsys=capsys)


@pytest.mark.parametrize("name", sorted(ULYSSES_WRONG))
def test_ulysses_rejects_wrong_programs(name):
    wrong, words = ULYSSES_WRONG[name]
    fails(ex.check_ulysses, wrong, words=words)
