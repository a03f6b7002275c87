"""Review of chapter 10's build checkers (issue 39's mutation pass): dispatch (10.5) and combine
(10.6) with ``all_to_all``. The right programs pass; wrong programs written as a learner would
(dropped choices sent anyway, top-1 only, the exchange in bf16, tokens exchanged instead of the
buffer, a capacity or an expert count written in, an extra all-reduce, a ring of permutes) fail.
Programs not repeated from tests/test_ex_moe.py."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes
from test_ex_moe import _pack, _unpack, combine, dispatch

import tpviz

ex = tpviz.exercises


# --- 10.5 dispatch -----------------------------------------------------------------------------

def _exchange(buffer):
    return jax.lax.all_to_all(buffer, "expert", split_axis=0, concat_axis=1, tiled=True)


def _dropped_kept(x, slot, e, c):  # a dropped choice (-1) clipped into slot 0
    return _exchange(_pack(x, jnp.clip(slot, 0), e, c))


def _first_choice(x, slot, e, c):  # only each token's first choice
    return _exchange(_pack(x, slot[:, :1], e, c))


def _bf16(x, slot, e, c):  # the exchange in bfloat16 "to halve the bytes"
    return _exchange(_pack(x, slot, e, c).astype(jnp.bfloat16)).astype(x.dtype)


def _load_logged(x, slot, e, c):  # right, plus an all-reduce of each expert's load
    load = jax.lax.psum(jnp.sum(slot >= 0), "expert")
    return dispatch(x, slot, e, c) + 0.0 * load


def _capacity_two(x, slot, e, c):  # the chapter's capacity C = 2 written in
    return _exchange(_pack(x, slot, e, 2))


def _tokens_sent(x, slot, e, c):  # every token and its slots sent everywhere, packed on arrival
    n, d = jax.lax.axis_size("expert"), jax.lax.axis_index("expert")
    xs = jax.lax.all_to_all(jnp.broadcast_to(x, (n, *x.shape)), "expert", 0, 0)
    ss = jax.lax.all_to_all(jnp.broadcast_to(slot, (n, *slot.shape)), "expert", 0, 0)
    packed = jnp.stack([_pack(xs[g], ss[g], e, c) for g in range(xs.shape[0])])  # [N, E, C, H]
    mine = jax.lax.dynamic_slice_in_dim(packed, d * (e // n), e // n, axis=1)
    return mine.transpose(1, 0, 2, 3).reshape(e // n, n * c, -1)


def _layer(x, slot, e, c):  # the chapter's layer asked for its buffers
    from tpviz.moe import run

    run.layer(x, {}, slot.shape[1], c)
    return dispatch(x, slot, e, c)


DISPATCH_WRONG = {
    "the chapter's layer": (_layer, r"write what `tpviz\.moe\.run\.layer`"),
    "dropped choices clipped into slot 0": (_dropped_kept, "wrong values"),
    "first choice only": (_first_choice, "wrong values"),
    "exchanged in bf16": (_bf16, "wrong values|bytes"),
    "expert load all-reduced": (_load_logged, "all-reduce"),
    "capacity 2 written in": (_capacity_two, "right on 4 devices .* but on|raised"),
    "tokens exchanged, packed on arrival": (_tokens_sent, "all-to-all|raised"),
}


def test_dispatch_right_program_passes(capsys):
    passes(ex.check_dispatch, dispatch, capsys=capsys)


@pytest.mark.parametrize("name", sorted(DISPATCH_WRONG))
def test_dispatch_wrong_program_fails(name):
    wrong, words = DISPATCH_WRONG[name]
    fails(ex.check_dispatch, wrong, words=words)


# --- 10.6 combine ------------------------------------------------------------------------------

def _back(results):
    return jax.lax.all_to_all(results, "expert", split_axis=1, concat_axis=0, tiled=True)


def _dropped_weighted(results, slot, gates):  # a dropped choice (-1) reads slot 0
    return _unpack(_back(results), jnp.clip(slot, 0), gates)


def _renormalised(results, slot, gates):  # the kept gates renormalised to sum to 1
    kept = jnp.where(slot >= 0, gates, 0.0)
    return _unpack(_back(results), slot, kept / jnp.maximum(kept.sum(1, keepdims=True), 1e-9))


def _ring(results, slot, gates):  # the results walked home by a ring of permutes
    n, d = jax.lax.axis_size("expert"), jax.lax.axis_index("expert")
    el, c = results.shape[0], results.shape[1] // n
    blocks = results.reshape(el, n, c, -1)
    held = blocks
    got = [jnp.take(blocks, d, axis=1)]  # [E/N, C, H] from this device's experts
    for _ in range(1, n):
        held = jax.lax.ppermute(held, "expert", [(i, (i + 1) % n) for i in range(n)])
        got.append(jnp.take(held, d, axis=1))  # from one device further back
    order = jnp.stack(got)  # [N (by distance), E/N, C, H]
    src = (d - jnp.arange(n)) % n
    back = jnp.zeros_like(order).at[src].set(order).reshape(n * el, c, -1)
    return _unpack(back, slot, gates)


def _experts_eight(results, slot, gates):  # the chapter's E = 8 written in
    back = _back(results)
    return _unpack(back.reshape(8, -1, back.shape[-1]), slot, gates)


def _gates_sent(results, slot, gates):  # weights applied at the experts: the gates sent there
    n = jax.lax.axis_size("expert")
    sent = jax.lax.all_to_all(jnp.broadcast_to(gates, (n, *gates.shape)), "expert", 0, 0)
    return combine(results, slot, gates) + 0.0 * jnp.sum(sent)


def _gshard(results, slot, gates):  # GShard's layer from the chapter
    from tpviz.moe import run

    run.gshard_layer(results, {}, slot.shape[1], 1)
    return combine(results, slot, gates)


COMBINE_WRONG = {
    "GShard's layer": (_gshard, r"write what `tpviz\.moe\.run\.gshard_layer`"),
    "dropped choices weighted": (_dropped_weighted, "wrong values"),
    "gates renormalised": (_renormalised, "wrong values"),
    "a ring of permutes": (_ring, "collective-permute"),
    "E = 8 written in": (_experts_eight, "right on 4 devices .* but on|raised"),
    "gates sent to the experts": (_gates_sent, "all-to-all"),
}


def test_combine_right_program_passes(capsys):
    passes(ex.check_combine, combine, capsys=capsys)


@pytest.mark.parametrize("name", sorted(COMBINE_WRONG))
def test_combine_wrong_program_fails(name):
    wrong, words = COMBINE_WRONG[name]
    fails(ex.check_combine, wrong, words=words)
