"""The inference chapter's checkers: the book's answers pass; wrong answers, and for the two
build checkers at least five wrong programs written as a learner would (a library shortcut, a
size hard-coded, a wrong sharding, an extra or wrong collective, right on one mesh size only),
fail with a message that names the mistake."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes, stub

import tpviz
from tpviz import inference
from tpviz.inference import exercises as answers
from tpviz.inference import model as tiny

ex = tpviz.exercises


# --- one-line and multi-step ---------------------------------------------------------------

def test_kv_per_token(capsys):
    passes(ex.check_kv_per_token, 2 * 88 * 8 * 128, capsys=capsys)
    fails(ex.check_kv_per_token, 88 * 8 * 128, words="keys alone")
    fails(ex.check_kv_per_token, 2 * 2 * 88 * 8 * 128, words="2 bytes")
    fails(ex.check_kv_per_token, 2 * 88 * 64 * 128, words="per query head")
    stub(ex.check_kv_per_token, ..., capsys=capsys)


def test_decode_batch(capsys):
    passes(ex.check_decode_batch, 144, capsys=capsys)
    fails(ex.check_decode_batch, 143, words="still")
    fails(ex.check_decode_batch, 575, words="more bytes")  # 2 bytes per weight
    fails(ex.check_decode_batch, 72, words="1 FLOP")
    fails(ex.check_decode_batch, 143.75, words="whole number")


def test_draft_length(capsys):
    best = (1 - 0.7**5) / (0.3 * 1.4)
    passes(ex.check_draft_length, (4, best), capsys=capsys)
    fails(ex.check_draft_length, (5, (1 - 0.7**6) / (0.3 * 1.5)), words="another")
    fails(ex.check_draft_length, (12, 1.5), words="rarely accepted")
    fails(ex.check_draft_length, (4, (1 - 0.7**5) / 0.3), words="without the draft")
    fails(ex.check_draft_length, 4, words="pair")


def test_draft_length_grades_the_pair_together():
    """A wrong speed-up says nothing about γ (no per-key feedback to try γ = 1 … 12 against),
    and a γ's message never shows its speed-up."""
    def gain(g):
        return (1 - 0.7 ** (g + 1)) / (0.3 * (0.1 * g + 1))

    for g in (3, 4, 5):  # the right γ with a wrong speed-up reads like a wrong γ's
        said = fails(ex.check_draft_length, (g, 1.7), words="the speed-up is 1.7, which is not")
        assert "another" not in said and f"{gain(g):.3f}" not in said
    said = fails(ex.check_draft_length, (3, gain(3)), words="speed-up of γ = 3, but another γ")
    assert f"{gain(3):.2f}" not in said
    fails(ex.check_draft_length, (0, 1.0), words="from 1 to 12")


def test_paging_gain(capsys):
    lengths = answers.REQUESTS
    blocks = sum(-(-n // 16) for n in lengths)
    right = len(lengths) * 2048 / (16 * blocks)
    passes(ex.check_paging_gain, right, capsys=capsys)
    fails(ex.check_paging_gain, len(lengths) * 2048 / sum(lengths), words="wasted nothing")
    fails(ex.check_paging_gain, 1 / right, words="Turn it over")


def _priced(system, chips, batch, dtype):
    s = inference.decode("LLaMA-3 70B", system, chips, batch, 4096, dtype)
    # (system, chips, batch, dtype, ms_per_token, dollars_per_million), as the check cell passes
    return (system, chips, batch, dtype, s.seconds * 1e3,
            s.cost_per_million(inference.CHIP_HOUR[system]))


def test_serving_design_admits_several_answers(capsys):
    for config in (("TPU v5p", 2, 96, "int8"), ("TPU v5p", 4, 128, "int8"),
                   ("TPU v5e", 8, 80, "int8")):  # three within 15% of the cheapest
        passes(ex.check_serving_design, *_priced(*config), capsys=capsys)


def test_serving_design_grades_the_reasons():
    fails(ex.check_serving_design, *_priced("TPU v5p", 4, 256, "int8"), words="over the 30 ms")
    fails(ex.check_serving_design, *_priced("TPU v5e", 8, 160, "int8"), words="HBM")
    fails(ex.check_serving_design, *_priced("H100", 8, 64, "int8"), words="costs")
    said = fails(ex.check_serving_design, *_priced("TPU v5e", 16, 1, "bf16"), words="costs")
    cost, best = _priced("TPU v5e", 16, 1, "bf16")[5], answers.cheapest()[0]
    assert f"costs {1 - best / cost:.0%} less" in said  # the cheapest's saving, below 100%
    right = _priced("TPU v5p", 2, 96, "int8")
    fails(ex.check_serving_design, *right[:4], 12.0, right[5], words="ms per token")
    fails(ex.check_serving_design, "TPU v9", *right[1:], words="choose system")


# --- 14.5: the decode step with its cache split by heads -----------------------------------

def heads_attention(x, wq, wk, wv, wo, k_cache, v_cache, pos):
    b, d = x.shape[0], k_cache.shape[-1]
    q = (x @ wq).reshape(b, -1, d)
    k = (x @ wk).reshape(b, 1, -1, d)
    v = (x @ wv).reshape(b, 1, -1, d)
    k_cache = jax.lax.dynamic_update_slice(k_cache, k, (0, pos, 0, 0))
    v_cache = jax.lax.dynamic_update_slice(v_cache, v, (0, pos, 0, 0))
    o, _ = tiny.attend(q, k_cache, v_cache, jnp.arange(k_cache.shape[1]) <= pos)
    return jax.lax.psum(o.reshape(b, -1) @ wo, "model"), k_cache, v_cache


def test_heads_decode_passes_the_books_answer(capsys):
    passes(ex.check_heads_decode, heads_attention, capsys=capsys)
    stub(ex.check_heads_decode, ..., capsys=capsys)


def _variant(*, width=None, gather=False, extra=False, offset=0, write=True, reduce=True,
             two_devices=False):
    """heads_attention with one mistake a learner makes."""
    def fn(x, wq, wk, wv, wo, k_cache, v_cache, pos):
        b, d = x.shape[0], width or k_cache.shape[-1]
        q = (x @ wq).reshape(b, -1, d)
        if extra:  # "gather the queries to be safe", then keep this device's again
            n = jax.lax.axis_size("model")
            everyone = jax.lax.all_gather(q, "model", axis=1, tiled=True)
            mine = q.shape[1]
            q = jax.lax.dynamic_slice_in_dim(everyone, jax.lax.axis_index("model") * mine, mine,
                                             axis=1) * n / n
        heads = 2 if two_devices else -1  # "2 key/value heads per device", as on 2 devices
        k = (x @ wk).reshape(b, 1, heads, d)
        v = (x @ wv).reshape(b, 1, heads, d)
        if write:
            k_cache = jax.lax.dynamic_update_slice(k_cache, k, (0, pos + offset, 0, 0))
            v_cache = jax.lax.dynamic_update_slice(v_cache, v, (0, pos + offset, 0, 0))
        keys, values = k_cache, v_cache
        if gather:  # the whole cache and every query head on every device
            keys = jax.lax.all_gather(k_cache, "model", axis=2, tiled=True)
            values = jax.lax.all_gather(v_cache, "model", axis=2, tiled=True)
            k_cache, v_cache, mine = keys, values, q.shape[1]
            q = jax.lax.all_gather(q, "model", axis=1, tiled=True)
        o, _ = tiny.attend(q, keys, values, jnp.arange(keys.shape[1]) <= pos)
        if gather:  # back to this device's heads for its rows of W_O
            o = jax.lax.dynamic_slice_in_dim(o, jax.lax.axis_index("model") * mine, mine, axis=1)
        out = o.reshape(b, -1) @ wo
        return (jax.lax.psum(out, "model") if reduce else out), k_cache, v_cache
    return fn


def test_heads_decode_mutation_pass():
    def shortcut(x, wq, wk, wv, wo, k_cache, v_cache, pos):  # the book's own layer
        c = tiny.Config(hidden=x.shape[1], heads=wq.shape[1] // k_cache.shape[-1],
                        kv_heads=k_cache.shape[2], head_dim=k_cache.shape[-1],
                        batch=x.shape[0], context=k_cache.shape[1])
        h = x
        o, k_all, v_all = inference.run._heads(c, 1, h, {"wq": wq, "wk": wk, "wv": wv},
                                               k_cache, v_cache, pos)
        return jax.lax.psum(o.reshape(x.shape[0], -1) @ wo, "model"), k_all, v_all

    fails(ex.check_heads_decode, shortcut, words="asks you to write what `tpviz.inference.run")
    fails(ex.check_heads_decode, _variant(width=8),
          words="right on 2 devices .* but on 4 devices with .* d = 4")  # d_h hard-coded
    fails(ex.check_heads_decode, _variant(gather=True),
          words="k_cache block of shape .3, 16, 4, 8., but this device holds")  # held whole
    fails(ex.check_heads_decode, _variant(extra=True), words="all-gather")  # an extra gather
    fails(ex.check_heads_decode, _variant(two_devices=True),
          words="right on 2 devices .* but on 4 devices")  # right on one mesh size only
    fails(ex.check_heads_decode, _variant(reduce=False), words="partial sum")  # no all-reduce
    fails(ex.check_heads_decode, _variant(write=False),
          words="hold none of the new tokens")  # the cache never written
    fails(ex.check_heads_decode, _variant(offset=1),
          words=r"position\(s\) \[8\], which no token has reached")  # one position off


def _own_attention(x, wq, wk, wv, wo, k_cache, v_cache, pos, *, strict=False, stale=False,
                   tile=False, scale=True, write_at=None):
    """heads_attention with its own softmax, as a learner who does not use tiny.attend writes
    it, with one of the mistakes the flags name."""
    b, d = x.shape[0], k_cache.shape[-1]
    q = (x @ wq).reshape(b, -1, d)  # [B, n_h/N, d_h]
    at = pos if write_at is None else write_at
    new_k = jax.lax.dynamic_update_slice(k_cache, (x @ wk).reshape(b, 1, -1, d), (0, at, 0, 0))
    new_v = jax.lax.dynamic_update_slice(v_cache, (x @ wv).reshape(b, 1, -1, d), (0, at, 0, 0))
    keys, values = (k_cache, v_cache) if stale else (new_k, new_v)
    group = q.shape[1] // keys.shape[2]
    spread = (lambda a: jnp.tile(a, (1, 1, group, 1))) if tile else (
        lambda a: jnp.repeat(a, group, axis=2))
    s = jnp.einsum("bnd,bsnd->bns", q, spread(keys)) / (jnp.sqrt(d) if scale else 1)
    seen = jnp.arange(keys.shape[1]) < pos if strict else jnp.arange(keys.shape[1]) <= pos
    o = jnp.einsum("bns,bsnd->bnd", jax.nn.softmax(jnp.where(seen, s, -1e30), -1),
                   spread(values))
    return jax.lax.psum(o.reshape(b, -1) @ wo, "model"), new_k, new_v


@pytest.mark.parametrize(("mistake", "words"), [
    ({}, None),  # the same program without a mistake passes
    ({"strict": True}, "leaves out position pos"),  # the mask off by one
    ({"stale": True}, "before this step's keys and values were written"),
    ({"tile": True}, "wrong key/value heads"),  # GQA's groups tiled, not repeated
    ({"scale": False}, "not divided by √d_h"),
    ({"write_at": 5}, r"no keys at position\(s\) \[6, 7\]"),  # the first free slot, hard-coded
])
def test_heads_decode_names_attention_mistakes(mistake, words, capsys):
    def fn(*args):
        return _own_attention(*args, **mistake)

    if words is None:
        passes(ex.check_heads_decode, fn, capsys=capsys)
    else:
        fails(ex.check_heads_decode, fn, words=words)


def test_heads_decode_names_collective_mistakes():
    def scattered(*args):  # a reduce-scatter and an all-gather: an all-reduce written by hand
        out, k, v = heads_attention(*args)
        part = out / jax.lax.axis_size("model")  # as if not yet reduced: the same sum
        total = jax.lax.psum_scatter(part, "model", scatter_dimension=1, tiled=True)
        return jax.lax.all_gather(total, "model", axis=1, tiled=True), k, v

    fails(ex.check_heads_decode, scattered, words="reduce-scatter")

    def twice(*args):  # the output summed again "so that every device agrees"
        out, k, v = heads_attention(*args)
        return jax.lax.pmean(out, "model"), k, v

    fails(ex.check_heads_decode, twice, words="6 all-reduces where the exercise needs 3")

    def two_devices(x, wq, wk, wv, wo, k_cache, v_cache, pos):  # pmean, times N = 2
        out, k, v = heads_attention(x, wq, wk, wv, wo, k_cache, v_cache, pos)
        return out / jax.lax.axis_size("model") * 2, k, v

    fails(ex.check_heads_decode, two_devices,
          words="right on 2 devices .* 0.5 times the right one on 4 devices")


# --- 14.6: the cross-device log-sum-exp combine ---------------------------------------------

def combine(o, lse):
    m = jax.lax.pmax(lse, "model")
    w = jnp.exp(lse - m)[..., None]
    total = jax.lax.psum(jnp.concatenate([o * w, w], axis=-1), "model")
    return total[..., :-1] / total[..., -1:]


def test_lse_combine_passes_the_books_answer_and_its_variants(capsys):
    passes(ex.check_lse_combine, combine, capsys=capsys)

    def three_reductions(o, lse):  # lse of the whole first, then weights e^(lse_i - lse)
        m = jax.lax.pmax(lse, "model")
        whole = m + jnp.log(jax.lax.psum(jnp.exp(lse - m), "model"))
        return jax.lax.psum(o * jnp.exp(lse - whole)[..., None], "model")

    passes(ex.check_lse_combine, three_reductions, capsys=capsys)


def test_lse_combine_mutation_pass():
    fails(ex.check_lse_combine, lambda o, lse: inference.combine_across(o, lse),
          words="asks you to write what `tpviz.inference.run.combine_across`")

    def naive(o, lse):  # e^lse without the max: overflows at large scores
        w = jnp.exp(lse)[..., None]
        return jax.lax.psum(o * w, "model") / jax.lax.psum(w, "model")

    fails(ex.check_lse_combine, naive, words="NaN|wrong values")

    def gathered(o, lse):  # every device's part on every device, then combined locally
        os = jax.lax.all_gather(o, "model")  # [N, B, n_h, d_h]
        lses = jax.lax.all_gather(lse, "model")
        w = jnp.exp(lses - lses.max(axis=0))[..., None]
        return (os * w).sum(axis=0) / w.sum(axis=0)

    fails(ex.check_lse_combine, gathered, words="all-gather")

    def averaged(o, lse):  # a plain mean of the parts
        return jax.lax.pmean(o, "model")

    fails(ex.check_lse_combine, averaged, words="equal weights")

    def two_devices(o, lse):  # psum(w) / N == pmean(w) only when N = 2
        m = jax.lax.pmax(lse, "model")
        w = jnp.exp(lse - m)[..., None]
        return jax.lax.psum(o * w, "model") / (2 * jax.lax.pmean(w, "model"))

    fails(ex.check_lse_combine, two_devices, words="right on 2 devices .* but on 4 devices")

    def agreed(o, lse):  # right, then an all-reduce "so that every device agrees"
        return jax.lax.pmean(combine(o, lse), "model")

    fails(ex.check_lse_combine, agreed, words="bytes reduced")

    def local_max(o, lse):  # each device's own max: the weights no longer compare
        w = jnp.exp(lse - lse.max(axis=-1, keepdims=True))[..., None]
        return jax.lax.psum(o * w, "model") / jax.lax.psum(w, "model")

    fails(ex.check_lse_combine, local_max, words="wrong values")


def test_lse_combine_names_weighting_mistakes(capsys):
    def ratio_of_means(o, lse):  # pmean for both sums: the ratio is the same, and so the bytes
        m = jax.lax.pmax(lse, "model")
        w = jnp.exp(lse - m)[..., None]
        return jax.lax.pmean(o * w, "model") / jax.lax.pmean(w, "model")

    passes(ex.check_lse_combine, ratio_of_means, capsys=capsys)

    def unnormalised(o, lse):  # weights relative to the largest, never divided by their sum;
        m = jax.lax.pmax(lse, "model")  # right on 2 devices when one part dominates every score
        return jax.lax.psum(o * jnp.exp(lse - m)[..., None], "model")

    fails(ex.check_lse_combine, unnormalised, words="on 2 devices .* do not add up to 1")

    def largest(o, lse):  # the part with the largest lse_i alone
        m = jax.lax.pmax(lse, "model")
        return jax.lax.psum(jnp.where((lse == m)[..., None], o, 0.0), "model")

    fails(ex.check_lse_combine, largest, words="on 2 devices .* largest lse_i is kept")
    fails(ex.check_lse_combine, lambda o, lse: o, words="own part")

    def gathered_lse(o, lse):  # every lse_i on every device, the sums reduced
        every = jax.lax.all_gather(lse, "model")  # [N, B, n_h]
        w = jnp.exp(lse - every.max(axis=0))[..., None]
        return jax.lax.psum(o * w, "model") / jax.lax.psum(w, "model")

    fails(ex.check_lse_combine, gathered_lse, words="all-gather")

    def pairwise(o, lse):  # exchanges parts with one neighbour: the whole on 2 devices only
        pair = [(0, 1), (1, 0)]
        other, theirs = (jax.lax.ppermute(a, "model", pair) for a in (lse, o))
        m = jnp.maximum(lse, other)
        a, b = jnp.exp(lse - m)[..., None], jnp.exp(other - m)[..., None]
        return (a * o + b * theirs) / (a + b)

    # right values on 2 devices, but permutes there (the bytes are read on every case)
    fails(ex.check_lse_combine, pairwise, words="on 2 devices .*collective-permute")


@pytest.mark.parametrize("check", [ex.check_heads_decode, ex.check_lse_combine])
def test_build_checkers_report_a_learners_exception(check):
    def broken(*args):
        raise ValueError("shapes do not match")

    fails(check, broken, words="ValueError")
