"""Chapter 10's checkers on the harness: GShard's drop order (10.3) and the load-balancing loss
(10.4) with the library's out of reach; the dispatch (10.5) and the combine (10.6) of the
expert-parallel layer, each a packing or unpacking around one all-to-all, on 4, 2 and 8 devices.
The book's solutions pass; wrong programs written as a learner would fail with a message that
names the mistake."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from checking import fails

import tpviz
from tpviz import moe
from tpviz.moe.builds import buffers, slots

ex = tpviz.exercises


def test_keep_and_aux_loss_refuse_the_library():
    fails(ex.check_keep, lambda e, n, c: moe.keep(e, n, c),
          words=r"write what `tpviz\.moe\.plan\.keep`")
    fails(ex.check_aux_loss, lambda p, e, w: moe.aux_loss(p, e, w),
          words=r"write what `tpviz\.moe\.plan\.aux_loss`")


def test_slots_follow_gshard_order():
    # the chapter's example: C = 4, expert 0 keeps the first choices of tokens 0, 1, 3, 4
    where = slots(tpviz.moe.exercises.CHOICES, 4, 4)
    assert where[:, 0].tolist() == [0, 1, 4, 2, 3, 8, -1, 12]
    assert where[2, 1] == -1 and (where >= 0).sum() == 12  # 4 of the 16 choices dropped
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    b = buffers(x, where, 1, 4, 4)[0]  # [E, C, H]
    assert b[0, 3].tolist() == x[4].tolist() and b[1, 0].tolist() == x[2].tolist()


# --- 10.5 dispatch -----------------------------------------------------------------------------

def dispatch(x, slot, num_experts, capacity):  # the book's solution
    place = jax.nn.one_hot(slot, num_experts * capacity, dtype=x.dtype)
    buffer = jnp.einsum("tks,th->sh", place, x).reshape(num_experts, capacity, x.shape[1])
    return jax.lax.all_to_all(buffer, "expert", split_axis=0, concat_axis=1, tiled=True)


def _pack(x, slot, e, c):
    return jnp.einsum("tks,th->sh", jax.nn.one_hot(slot, e * c, dtype=x.dtype), x).reshape(
        e, c, x.shape[1])


def _dispatch_scatter(x, slot, e, c):  # .at[slot].set: a dropped choice (-1) lands in the last slot
    k = slot.shape[1]
    buffer = jnp.zeros((e * c, x.shape[1]), x.dtype).at[slot.reshape(-1)].set(
        jnp.repeat(x, k, axis=0)).reshape(e, c, -1)
    return jax.lax.all_to_all(buffer, "expert", 0, 1, tiled=True)


def _dispatch_four(x, slot, e, c):  # the experts split into 4 blocks, as on the chapter's mesh
    b = _pack(x, slot, e, c).reshape(4, e // 4, c, -1)
    got = jax.lax.all_to_all(b, "expert", 0, 0)  # [4 groups, E/4, C, H]
    return got.transpose(1, 0, 2, 3).reshape(e // 4, 4 * c, -1)


def _dispatch_gathered(x, slot, e, c):  # every group's buffer to every device, then pick
    n, d = jax.lax.axis_size("expert"), jax.lax.axis_index("expert")
    every = jax.lax.all_gather(_pack(x, slot, e, c), "expert")  # [N, E, C, H]
    mine = jax.lax.dynamic_slice_in_dim(every, d * (e // n), e // n, axis=1)
    return mine.transpose(1, 0, 2, 3).reshape(e // n, n * c, -1)


def _dispatch_per_choice(x, slot, e, c):  # one exchange per choice, added afterwards
    out = 0
    for j in range(slot.shape[1]):
        out = out + jax.lax.all_to_all(_pack(x, slot[:, j:j + 1], e, c), "expert", 0, 1,
                                       tiled=True)
    return out


def _dispatch_library(x, slot, e, c):  # the chapter's routing tensors, from made-up logits
    logits = jax.nn.one_hot(slot[:, 0] // c, e) * 10
    moe.run.dispatch_tensors(logits, 1, c)
    return dispatch(x, slot, e, c)


DISPATCH_WRONG = {
    "library": (_dispatch_library, r"write what `tpviz\.moe\.run\.dispatch_tensors`"),
    "dropped into the last slot": (_dispatch_scatter, "wrong values"),
    "four devices": (_dispatch_four, "right on 4 devices .* but on 2 devices"),
    "gathered": (_dispatch_gathered, "all-gather .* does not need"),
    "one exchange per choice": (_dispatch_per_choice, "2 all-to-alls where the exercise needs 1"),
    "not stacked by group": (lambda x, s, e, c: jax.lax.all_to_all(_pack(x, s, e, c), "expert",
                                                                     0, 0, tiled=True),
                             "block of shape"),
    "no exchange": (lambda x, s, e, c: _pack(x, s, e, c), "block of shape"),
}


def test_dispatch_solution_passes_and_reports_the_all_to_all(capsys):
    ex.check_dispatch(dispatch)
    out = capsys.readouterr().out  # E = 8, C = 2, H = 3 float32: a buffer of 192 bytes
    assert "✓" in out and "an all-to-all along 'expert' of 192 bytes" in out


@pytest.mark.parametrize("name", sorted(DISPATCH_WRONG))
def test_dispatch_rejects_wrong_programs(name):
    wrong, words = DISPATCH_WRONG[name]
    fails(ex.check_dispatch, wrong, words=words)


# --- 10.6 combine ------------------------------------------------------------------------------

def combine(results, slot, gates):  # the book's solution
    back = jax.lax.all_to_all(results, "expert", split_axis=1, concat_axis=0, tiled=True)
    e, c, h = back.shape
    place = jax.nn.one_hot(slot, e * c, dtype=back.dtype)
    return jnp.einsum("tks,tk,sh->th", place, gates, back.reshape(e * c, h))


def _unpack(back, slot, gates):
    e, c, h = back.shape
    return jnp.einsum("tks,tk,sh->th", jax.nn.one_hot(slot, e * c, dtype=back.dtype), gates,
                      back.reshape(e * c, h))


def _combine_gathered(results, slot, gates):  # every device's results to every device
    n, d = jax.lax.axis_size("expert"), jax.lax.axis_index("expert")
    every = jax.lax.all_gather(results, "expert", tiled=True)  # [E, N·C, H]
    c = results.shape[1] // n
    return _unpack(jax.lax.dynamic_slice_in_dim(every, d * c, c, axis=1), slot, gates)


def _combine_psum(results, slot, gates):  # each device scatters its experts' rows, then a sum
    n, d = jax.lax.axis_size("expert"), jax.lax.axis_index("expert")
    el, c = results.shape[0], results.shape[1] // n
    full = jnp.zeros((n * el, results.shape[1], results.shape[2]), results.dtype)
    full = jax.lax.dynamic_update_slice_in_dim(full, results, d * el, axis=0)
    every = jax.lax.psum(full, "expert")
    return _unpack(jax.lax.dynamic_slice_in_dim(every, d * c, c, axis=1), slot, gates)


def _combine_four(results, slot, gates):  # 4 groups hard-coded
    el, c = results.shape[0], results.shape[1] // 4
    back = jax.lax.all_to_all(results.reshape(el, 4, c, -1), "expert", 1, 0, tiled=True)
    return _unpack(back.reshape(4 * el, c, -1), slot, gates)


COMBINE_WRONG = {
    "library": (lambda r, s, g: (moe.run.layer, moe.forward(None, 1, 1))[0] and combine(r, s, g),
                r"write what `tpviz\.moe\.run\.forward`"),
    "no gates": (lambda r, s, g: combine(r, s, jnp.ones_like(g)), "wrong values"),
    "gathered": (_combine_gathered, "all-gather .* does not need"),
    "summed over devices": (_combine_psum, "all-reduce .* does not need"),
    "four groups": (_combine_four, "right on 4 devices .* but on (2|8) devices"),
    "wrong axes": (lambda r, s, g: _unpack(jax.lax.all_to_all(r, "expert", 1, 1, tiled=True),
                                           s, g), "raised|wrong values"),
}


def test_combine_solution_passes_and_reports_the_all_to_all(capsys):
    ex.check_combine(combine)
    out = capsys.readouterr().out
    assert "✓" in out and "an all-to-all along 'expert' of 192 bytes" in out


@pytest.mark.parametrize("name", sorted(COMBINE_WRONG))
def test_combine_rejects_wrong_programs(name):
    wrong, words = COMBINE_WRONG[name]
    fails(ex.check_combine, wrong, words=words)


def test_every_case_drops_a_choice():
    from tpviz.core.harness import cases
    from tpviz.moe.builds import DISPATCH

    for case in cases(DISPATCH):
        where = np.asarray(case.args[1])
        assert (where == -1).any() and (where >= 0).any()
    assert len({c.n for c in cases(DISPATCH)}) >= 2
