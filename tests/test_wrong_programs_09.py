"""Review of chapter 9's build checkers (issue 39's mutation pass): the ring in ``shard_map``
(9.4) and DeepSpeed-Ulysses (9.7). The right programs pass; wrong programs written as a learner
would (every block kept and one softmax, the same block passed round again, the causal mask, an
extra all-reduce, gathers instead of all-to-alls, the wrong axis split) fail. Programs not
repeated from tests/test_ex_context.py."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes
from test_ex_context import ring, ulysses

import tpviz
from tpviz import context
from tpviz.context import builds
from tpviz.core import harness
from tpviz.core.exercises import Wrong

ex = tpviz.exercises
RING = [lambda n: [(i, (i + 1) % n) for i in range(n)]][0]


# --- 9.4 the ring ------------------------------------------------------------------------------

def _kept_blocks(q, k, v):  # the ring's permutes, every block kept, then one two-pass softmax
    n = jax.lax.axis_size("context")
    kv, blocks = jnp.stack([k, v]), [jnp.stack([k, v])]
    for _ in range(n - 1):
        kv = jax.lax.ppermute(kv, "context", RING(n))
        blocks.append(kv)
    scale = q.shape[-1] ** -0.5
    scores = [jnp.einsum("bqhd,bkhd->bhqk", q, b[0]) * scale for b in blocks]
    top = jnp.max(jnp.stack([s.max(-1) for s in scores]), axis=0)
    weights = [jnp.exp(s - top[..., None]) for s in scores]
    total = sum(w.sum(-1) for w in weights)
    o = sum(jnp.einsum("bhqk,bkhd->bqhd", w, b[1]) for w, b in zip(weights, blocks, strict=True))
    return o / jnp.transpose(total, (0, 2, 1))[..., None]


def _same_block(q, k, v):  # the own block passed on every step: N - 1 right-sized permutes
    n = jax.lax.axis_size("context")
    own = jnp.stack([k, v])
    o, lse = context.block_attention(q, k, v)
    for _ in range(n - 1):
        kv = jax.lax.ppermute(own, "context", RING(n))
        o, lse = context.combine(o, lse, *context.block_attention(q, kv[0], kv[1]))
    return o


def _normalised(q, k, v):  # the ring, then an all-reduce of the log-sum-exp "to check it"
    out = ring(q, k, v)
    return out + 0.0 * jax.lax.psum(jnp.sum(out), "context")


def _causal(q, k, v):  # the ring with a causal mask on the own block: not this exercise
    n = jax.lax.axis_size("context")
    c = q.shape[1]
    mask = jnp.tril(jnp.ones((c, c), bool))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
    scores = jnp.where(mask, scores, -jnp.inf)
    lse = jax.nn.logsumexp(scores, -1)
    o = jnp.einsum("bhqk,bkhd->bqhd", jnp.exp(scores - lse[..., None]), v)
    lse = jnp.transpose(lse, (0, 2, 1))
    kv = jnp.stack([k, v])
    for _ in range(n - 1):
        kv = jax.lax.ppermute(kv, "context", RING(n))
        o, lse = context.combine(o, lse, *context.block_attention(q, kv[0], kv[1]))
    return o


def _queries_travel(q, k, v):  # the queries go round instead, each result sent home at the end
    n = jax.lax.axis_size("context")
    me = jax.lax.axis_index("context")
    travelling, results = q, []
    for s in range(n):
        results.append(context.block_attention(travelling, k, v))  # q of device me - s
        if s < n - 1:
            travelling = jax.lax.ppermute(travelling, "context", RING(n))
    del me
    return results[0][0]


RING_WRONG = {
    "the library's ring step": (
        lambda q, k, v: context.ring.forward(q, k, v, "context", False, "contiguous"),
        r"write what `tpviz\.context\.ring\.forward`"),
    "the same block passed again": (_same_block, "wrong values"),
    "an all-reduce to check it": (_normalised, "all-reduce"),
    "the causal mask": (_causal, "wrong values"),
    "queries travel, results never combined": (_queries_travel, "wrong values"),
}


def test_ring_right_program_passes(capsys):
    passes(ex.check_ring_step, ring, capsys=capsys)


@pytest.mark.parametrize("name", sorted(RING_WRONG))
def test_ring_wrong_program_fails(name):
    wrong, words = RING_WRONG[name]
    fails(ex.check_ring_step, wrong, words=words)


def test_ring_every_block_kept_fails():
    """The ring's permutes, but every block kept and one softmax over all of them: the memory of
    the all-gather scheme, without an array of the whole sequence's shape. On CPU the compiled
    temporaries do not tell it from the ring (XLA keeps the unrolled steps' buffers either
    way); the traced program's live bytes grow with N (by 7 blocks from 4 to 8 devices)."""
    fails(ex.check_ring_step, _kept_blocks,
          words=r"on 4 devices .*holds up to [\d,]+ bytes at once on 4 devices and [\d,]+ on 8: "
                r"[3-9]\.\d key/value blocks")


def _kept_in_the_carry(q, k, v):  # the blocks written into a loop's carry, one softmax after
    n = jax.lax.axis_size("context")
    kv = jnp.stack([k, v])

    def step(i, carry):
        kv, kept = carry
        kv = jax.lax.ppermute(kv, "context", RING(n))
        return kv, kept.at[i].set(kv)

    _, kept = jax.lax.fori_loop(1, n, step, (kv, jnp.zeros((n, *kv.shape)).at[0].set(kv)))
    scores = jnp.einsum("bqhd,nbkhd->nbhqk", q, kept[:, 0]) * q.shape[-1] ** -0.5
    weights = jnp.exp(scores - scores.max(axis=(0, 4), keepdims=True))
    o = jnp.einsum("nbhqk,nbkhd->bqhd", weights, kept[:, 1])
    return o / jnp.transpose(weights.sum(axis=(0, 4)), (0, 2, 1))[..., None]


def _partials_kept(q, k, v):  # each block's attention kept, all combined after the last permute
    n = jax.lax.axis_size("context")
    kv, parts = jnp.stack([k, v]), [context.block_attention(q, k, v)]
    for _ in range(n - 1):
        kv = jax.lax.ppermute(kv, "context", RING(n))
        parts.append(context.block_attention(q, kv[0], kv[1]))
    o, lse = parts[0]
    for part in parts[1:]:
        o, lse = context.combine(o, lse, *part)
    return o


@pytest.mark.parametrize("wrong", [_kept_in_the_carry, _partials_kept])
def test_ring_merged_at_the_end_fails(wrong):
    fails(ex.check_ring_step, wrong,
          words="holds up to .* merges at the end|spans the whole sequence")
    # the traced check alone names it (XLA may fuse the carry's blocks into one array of the
    # whole sequence, which the compiled-memory check sees first)
    with pytest.raises(Wrong, match=r"on 4 devices .* merges at the end"):
        harness.grade(wrong, dataclasses.replace(builds.RING, memory=None))


def _ring_in_a_loop(q, k, v):  # right: the ring as a fori_loop, (kv, o, lse) carried
    n = jax.lax.axis_size("context")

    def step(_, carry):
        kv, o, lse = carry
        kv = jax.lax.ppermute(kv, "context", RING(n))
        return kv, *context.combine(o, lse, *context.block_attention(q, kv[0], kv[1]))

    first = context.block_attention(q, k, v)
    return jax.lax.fori_loop(0, n - 1, step, (jnp.stack([k, v]), *first))[1]


def _sent_ahead(q, k, v):  # right: the next block sent before this one is attended to
    n = jax.lax.axis_size("context")
    kv, o, lse = jnp.stack([k, v]), None, None
    for s in range(n):
        ahead = jax.lax.ppermute(kv, "context", RING(n)) if s < n - 1 else None
        part = context.block_attention(q, kv[0], kv[1])
        o, lse = part if o is None else context.combine(o, lse, *part)
        kv = ahead
    return o


@pytest.mark.parametrize("right", [_ring_in_a_loop, _sent_ahead])
def test_ring_other_online_rings_pass(right, capsys):
    passes(ex.check_ring_step, right, capsys=capsys)


def test_ring_checker_patched_fails(monkeypatch):
    """A notebook that puts a lenient copy of the checker's declaration in its place (a module
    global) before calling the check: refused, and the gathering program is not passed."""
    lenient = dataclasses.replace(builds.RING, collectives=None, extra=None, memory=None)
    monkeypatch.setattr(builds, "RING", lenient)
    fails(ex.check_ring_step, lambda q, k, v: context.block_attention(*(
        jax.lax.all_gather(t, "context", axis=1, tiled=True) if t is not q else t
        for t in (q, k, v)))[0], words="not the one tpviz.context.builds was imported with")


def test_a_reloaded_module_declares_its_builds_anew():
    """Reloading a builds module (autoreload does) runs its top level again: the new
    declarations are the checks' own; a copy made elsewhere is not, nor is it after a reload."""
    import importlib

    from tpviz.core.harness_build import declared

    before = builds.RING
    try:
        importlib.reload(builds)
        assert builds.RING is not before
        declared(builds.RING, "tpviz.context.builds")  # no exception: the new one is declared
        declared(before, "tpviz.context.builds")  # the old one, still held elsewhere, stays declared
        with pytest.raises(Wrong, match="replaced it"):
            declared(dataclasses.replace(builds.RING, memory=None), "tpviz.context.builds")
    finally:
        importlib.reload(builds)


# --- 9.7 Ulysses -------------------------------------------------------------------------------

def _heads(t):
    return jax.lax.all_to_all(t, "context", split_axis=2, concat_axis=1, tiled=True)


def _gathered_back(q, k, v):  # to heads by all-to-all; back by gathering every head and slicing
    o = context.attention(_heads(q), _heads(k), _heads(v))  # [B, S, n_h/N, d_h]
    whole = jax.lax.all_gather(o, "context", axis=2, tiled=True)  # [B, S, n_h, d_h]
    c, me = q.shape[1], jax.lax.axis_index("context")
    return jax.lax.dynamic_slice_in_dim(whole, me * c, c, axis=1)


def _head_dim(q, k, v):  # the head dimension d_h split instead of the heads
    def split(t):
        return jax.lax.all_to_all(t, "context", split_axis=3, concat_axis=1, tiled=True)

    o = context.attention(split(q), split(k), split(v))
    return jax.lax.all_to_all(o, "context", split_axis=1, concat_axis=3, tiled=True)


def _kv_gathered(q, k, v):  # q to heads; k and v gathered whole, then the heads sliced
    n, me = jax.lax.axis_size("context"), jax.lax.axis_index("context")
    h = q.shape[2] // n

    def mine(t):
        whole = jax.lax.all_gather(t, "context", axis=1, tiled=True)
        return jax.lax.dynamic_slice_in_dim(whole, me * h, h, axis=2)

    o = context.attention(_heads(q), mine(k), mine(v))
    return jax.lax.all_to_all(o, "context", split_axis=1, concat_axis=2, tiled=True)


def _twice(q, k, v):  # a second Ulysses "to check" the first (identical copies the compiler
    out = ulysses(q, k, v)  # merges; this one differs), its result thrown away
    return out + 0.0 * ulysses(q, k, 2.0 * v)


def _local_heads(q, k, v):  # each device attends over its own tokens only, for every head
    return context.attention(q, k, v)


ULYSSES_WRONG = {
    "the library's all-gather scheme": (
        lambda q, k, v: context.run.allgather_attention(q, k, v),
        r"write what `tpviz\.context\.run\.allgather_attention`"),
    "the library's head exchange": (
        lambda q, k, v: jax.lax.all_to_all(context.attention(*(context.run._to_heads(
            t, "context") for t in (q, k, v))), "context", 1, 2, tiled=True),
        r"write what `tpviz\.context\.run\._to_heads`"),
    "back by gather and slice": (_gathered_back, "all-gather along"),
    "head dimension split": (_head_dim, "wrong values"),
    "k and v gathered": (_kv_gathered, "all-gather along"),
    "local attention only": (_local_heads, "wrong values"),
}


def test_ulysses_right_program_passes(capsys):
    passes(ex.check_ulysses, ulysses, capsys=capsys)


@pytest.mark.parametrize("name", sorted(ULYSSES_WRONG))
def test_ulysses_wrong_program_fails(name):
    wrong, words = ULYSSES_WRONG[name]
    fails(ex.check_ulysses, wrong, words=words)


def _gather_by_all_to_all(q, k, v):  # k and v stacked and sent whole to every device by an
    n = jax.lax.axis_size("context")  # all-to-all (an all-gather in disguise), no way back
    kv = jnp.broadcast_to(jnp.stack([k, v]), (n, 2, *k.shape))
    got = jax.lax.all_to_all(kv, "context", 0, 0, tiled=True)  # [N, 2, B, S/N, n_h, d_h]
    whole = jnp.concatenate(list(got), axis=2)  # [2, B, S, n_h, d_h]
    return context.block_attention(q, whole[0], whole[1])[0]


def test_ulysses_all_gather_by_all_to_all_fails():
    """On 2 devices its one all-to-all moves 4 buffers' bytes, as Ulysses' four do."""
    fails(ex.check_ulysses, _gather_by_all_to_all, words="all-to-alls of|whole")


def test_ulysses_every_exchange_twice_fails():
    fails(ex.check_ulysses, _twice, words="all-to-alls of .* bytes|wrong values|right values")
