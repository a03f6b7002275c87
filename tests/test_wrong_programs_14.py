"""Review of chapter 14's build checkers (issue 44's independent mutation pass): the heads-split
decode attention (14.5) and the cross-device log-sum-exp combine (14.6). The programs were
written from the chapter's prompts and the library's public API, before reading the checkers,
as a learner would: the library's functions reached another way, a size hard-coded, an operand
held whole, a collective written by hand or added, one right on one mesh size only, and naive
log-sum-exp combines. None repeats a program of tests/test_ex_inference.py."""

import types

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes

import tpviz
from tpviz.inference import model as tiny
from tpviz.inference import run

ex = tpviz.exercises


# --- 14.5: a decode step's attention with the cache split by key/value heads ----------------

def _write(cache, new, pos):
    return jax.lax.dynamic_update_slice(cache, new, (0, pos, 0, 0))


def heads_attention(x, wq, wk, wv, wo, k_cache, v_cache, pos, *, kv=-1, reduce=None,
                    only_device0=False):
    """A right answer, with the places a learner's mistake goes: ``kv`` key/value heads per
    device in the reshape, ``reduce`` instead of ``psum`` after W_O, the cache written on
    device 0 only."""
    b, d = x.shape[0], k_cache.shape[-1]
    q = (x @ wq).reshape(b, -1, d)  # [B, n_h/N, d_h]
    k = (x @ wk).reshape(b, 1, kv, d)  # [B, 1, n_kv/N, d_h]
    v = (x @ wv).reshape(b, 1, kv, d)
    new_k, new_v = _write(k_cache, k, pos), _write(v_cache, v, pos)
    o, _ = tiny.attend(q, new_k, new_v, jnp.arange(k_cache.shape[1]) <= pos)
    if only_device0:  # "device 0 keeps the cache"
        first = jax.lax.axis_index("model") == 0
        new_k, new_v = jnp.where(first, new_k, k_cache), jnp.where(first, new_v, v_cache)
    part = o.reshape(b, -1) @ wo  # [B, H]: this device's heads' share
    return (reduce or (lambda a: jax.lax.psum(a, "model")))(part), new_k, new_v


def _ring_sum(a):
    """An all-reduce by hand: N - 1 shifts around the ring, each adding the neighbour's part."""
    n = jax.lax.axis_size("model")
    ring = [(i, (i + 1) % n) for i in range(n)]
    total, moving = a, a
    for _ in range(n - 1):
        moving = jax.lax.ppermute(moving, "model", ring)
        total = total + moving
    return total


def _swap_sum(a):
    """An all-reduce by hand for two devices: add what the other one holds."""
    return a + jax.lax.ppermute(a, "model", [(0, 1), (1, 0)])


def test_heads_decode_right_programs_pass(capsys):
    passes(ex.check_heads_decode, heads_attention, capsys=capsys)


def _unmarked(fn):
    """The function's code under a new function object: the library's body, its mark gone."""
    fn = getattr(fn, "__wrapped__", fn)
    return types.FunctionType(fn.__code__, fn.__globals__, "mine", fn.__defaults__,
                              fn.__closure__)


def _shortcut_heads(x, wq, wk, wv, wo, k_cache, v_cache, pos):
    heads = _unmarked(run._heads)  # the book's per-device attention, copied
    d = k_cache.shape[-1]
    c = tiny.Config(hidden=x.shape[1], heads=wq.shape[1] // d, kv_heads=k_cache.shape[2],
                    head_dim=d, batch=x.shape[0], context=k_cache.shape[1])
    o, k_all, v_all = heads(c, 1, x, {"wq": wq, "wk": wk, "wv": wv}, k_cache, v_cache, pos)
    return jax.lax.psum(o.reshape(x.shape[0], -1) @ wo, "model"), k_all, v_all


def _weights_whole(x, wq, wk, wv, wo, k_cache, v_cache, pos):
    """Every head's projections on every device (wq, wk, wv gathered), then this device's."""
    b, d = x.shape[0], k_cache.shape[-1]
    me = jax.lax.axis_index("model")

    def mine(w, width):  # [H, n/N * d_h] -> all heads, then this device's columns
        whole = jax.lax.all_gather(w, "model", axis=1, tiled=True)
        return jax.lax.dynamic_slice_in_dim(x @ whole, me * width, width, axis=1)

    q = mine(wq, wq.shape[1]).reshape(b, -1, d)
    k = mine(wk, wk.shape[1]).reshape(b, 1, -1, d)
    v = mine(wv, wv.shape[1]).reshape(b, 1, -1, d)
    k_cache, v_cache = _write(k_cache, k, pos), _write(v_cache, v, pos)
    o, _ = tiny.attend(q, k_cache, v_cache, jnp.arange(k_cache.shape[1]) <= pos)
    return jax.lax.psum(o.reshape(b, -1) @ wo, "model"), k_cache, v_cache


def _sum_then_project(x, wq, wk, wv, wo, k_cache, v_cache, pos):
    b, d = x.shape[0], k_cache.shape[-1]
    q = (x @ wq).reshape(b, -1, d)
    k_cache = _write(k_cache, (x @ wk).reshape(b, 1, -1, d), pos)
    v_cache = _write(v_cache, (x @ wv).reshape(b, 1, -1, d), pos)
    o, _ = tiny.attend(q, k_cache, v_cache, jnp.arange(k_cache.shape[1]) <= pos)
    o = jax.lax.psum(o, "model")  # "the heads' outputs, added up": different heads summed
    return o.reshape(b, -1) @ wo, k_cache, v_cache


HEADS_WRONG = {
    # the book's _heads, its mark removed (a new function object over the same code)
    "library shortcut, the mark removed": (_shortcut_heads,
                                           r"asks you to write what `tpviz\.inference\.run\._heads`"),
    # one key/value head per device, as on the sizes the learner tried
    "n_kv/N hard-coded to 1": (lambda *a: heads_attention(*a, kv=1),
                               r"raised CompileError.*cannot reshape"),
    "weights gathered whole": (_weights_whole, "all-gather along 'model' of 12,288 bytes, a kind"),
    "an all-reduce written as a ring of permutes": (
        lambda *a: heads_attention(*a, reduce=_ring_sum),
        "collective-permutes? along .*a kind of collective this exercise does not need"),
    "summed with the other device only": (
        lambda *a: heads_attention(*a, reduce=_swap_sum),
        "collective-permutes? along .*a kind of collective this exercise does not need"),
    "heads summed before W_O": (_sum_then_project, "right shape but wrong values"),
    "the cache written on device 0 only": (
        lambda *a: heads_attention(*a, only_device0=True),
        r"keys and values for key/value head\(s\) \[0, 1\] only, not for \[2, 3\]"),
}


@pytest.mark.parametrize("name", sorted(HEADS_WRONG))
def test_heads_decode_wrong_program_fails(name):
    program, words = HEADS_WRONG[name]
    fails(ex.check_heads_decode, program, words=words)


# --- 14.6: the log-sum-exp combine across devices -------------------------------------------

def combine(o, lse):
    m = jax.lax.pmax(lse, "model")  # [B, n_h]
    w = jnp.exp(lse - m)[..., None]  # [B, n_h, 1]
    return jax.lax.psum(o * w, "model") / jax.lax.psum(w, "model")


def test_lse_combine_right_programs_pass(capsys):
    passes(ex.check_lse_combine, combine, capsys=capsys)


def _weighted(o, lse, shift, total=None):
    w = jnp.exp(lse - shift)[..., None]
    return (total or (lambda a: jax.lax.psum(a, "model")))(o * w) / jax.lax.psum(w, "model")


def _global_lse(o, lse):
    """The whole context's log-sum-exp from e^lse summed across devices, without a shift."""
    whole = jnp.log(jax.lax.psum(jnp.exp(lse), "model"))
    return jax.lax.psum(o * jnp.exp(lse - whole)[..., None], "model")


def _pair_max(o, lse):
    """The largest lse found by asking the other device, as on two devices."""
    m = jnp.maximum(lse, jax.lax.ppermute(lse, "model", [(0, 1), (1, 0)]))
    return _weighted(o, lse, m)


def _own_share(o, lse):
    """Each device's weighted part over the sum of weights: the numerator never summed."""
    m = jax.lax.pmax(lse, "model")
    w = jnp.exp(lse - m)[..., None]
    return o * w / jax.lax.psum(w, "model")


LSE_WRONG = {
    "library shortcut, re-imported under another name": (
        lambda o, lse: __import__("tpviz.inference.run", fromlist=["x"]).combine_across(o, lse),
        r"asks you to write what `tpviz\.inference\.run\.combine_across"),
    "library shortcut, the mark removed": (
        lambda o, lse: _unmarked(run.combine_across)(o, lse, "model"),
        r"asks you to write what `tpviz\.inference\.run\.combine_across"),
    "a fixed shift of 50 (one size of score)": (
        lambda o, lse: _weighted(o, lse, 50.0), "NaN or infinite"),
    "naive: shifted by the mean lse": (
        lambda o, lse: _weighted(o, lse, jax.lax.pmean(lse, "model")), "NaN or infinite"),
    "naive: log of the summed e^lse": (_global_lse, "(?s)right shape but wrong values.*overflows"),
    # right values on 2 devices, but a permute there (the bytes are read on every case)
    "the max from the other device only": (_pair_max, r"on 2 devices .*collective-permute"),
    "each device's own share, not summed": (_own_share, "share of the whole.*never added together"),
    "the numerator summed by a ring of permutes": (
        lambda o, lse: _weighted(o, lse, jax.lax.pmax(lse, "model"), total=_ring_sum),
        "collective-permutes? .* N times the bytes of one"),
}


@pytest.mark.parametrize("name", sorted(LSE_WRONG))
def test_lse_combine_wrong_program_fails(name):
    program, words = LSE_WRONG[name]
    fails(ex.check_lse_combine, program, words=words)


def _gathered_when_few(o, lse):
    """On a few devices every part is gathered and combined locally ("only a few parts"); on
    more, the all-reduces. Right values everywhere; right bytes on 8 devices only."""
    if jax.lax.axis_size("model") > 4:
        return combine(o, lse)
    os, lses = jax.lax.all_gather(o, "model"), jax.lax.all_gather(lse, "model")
    w = jnp.exp(lses - lses.max(axis=0))[..., None]
    return (os * w).sum(axis=0) / w.sum(axis=0)


def test_lse_combine_bytes_are_checked_on_every_case(capsys):
    """14.6 once read the bytes on its 8-device case only, outside its Build: a program that
    gathers on 2 and 4 devices passed. The Build now reads them on every case."""
    import dataclasses

    from tpviz.core import harness
    from tpviz.inference import builds

    last = dataclasses.replace(builds.COMBINE, cases=builds.COMBINE.cases[-1:])
    assert last.cases[0][0] == (8,)
    assert "Flash-decoding" in harness.grade(_gathered_when_few, last)  # right there
    fails(ex.check_lse_combine, _gathered_when_few,
          words=r"^.*on 2 devices .*right values, but .*all-gather.*N times the bytes of one")
