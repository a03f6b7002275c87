"""Chapter 1's build checkers on the harness: the ring reduce-scatter (1.5) and data-parallel
gradients (1.6). The book's solutions and other right answers (a ring in fori_loop; the gradient
of the pmean of the loss under check_vma=True) pass; wrong programs written as a learner would
fail with a message that names the mistake; the true/false check gives no per-key feedback."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes

import tpviz
from tpviz import collectives
from tpviz.collectives.exercises import TRUTH, dp_loss
from tpviz.core import exercises as framework

ex = tpviz.exercises


# --- 1.5 a ring reduce-scatter with ppermute ---------------------------------------------------

def _ring(x, axis, k, devices=None, send=lambda me, s, k: (me - s - 1) % k):
    """The book's ring; ``devices`` fixes the ring's size (a one-size answer)."""
    me, n = jax.lax.axis_index(axis), devices or k
    chunks = x.reshape(k, -1)
    for s in range(k - 1):
        piece = jax.lax.dynamic_index_in_dim(chunks, send(me, s, k), keepdims=False)
        got = jax.lax.ppermute(piece, axis, [(i, (i + 1) % n) for i in range(n)])
        chunks = chunks.at[(send(me, s, k) - 1) % k].add(got)
    return jax.lax.dynamic_index_in_dim(chunks, me, keepdims=False)


def _ring_fori(x, axis, k):  # the same ring, as a fori_loop: one permute in the HLO text
    me = jax.lax.axis_index(axis)

    def step(s, chunks):
        piece = jax.lax.dynamic_index_in_dim(chunks, (me - s - 1) % k, keepdims=False)
        got = jax.lax.ppermute(piece, axis, [(i, (i + 1) % k) for i in range(k)])
        mine = (me - s - 2) % k
        return jax.lax.dynamic_update_index_in_dim(
            chunks, jax.lax.dynamic_index_in_dim(chunks, mine, keepdims=False) + got, mine, 0)

    chunks = jax.lax.fori_loop(0, k - 1, step, x.reshape(k, -1))
    return jax.lax.dynamic_index_in_dim(chunks, me, keepdims=False)


def _follow(x, axis, k):  # the library's ring plan, followed
    return collectives.follow(collectives.plan("ring", "reduce-scatter", k, 4 * x.size), axis)(x)


def _gather_then_sum(x, axis, k):  # every device's whole array gathered: the operand held whole
    return jax.lax.all_gather(x, axis).sum(0).reshape(k, -1)[jax.lax.axis_index(axis)]


def _whole_each_step(x, axis, k):  # the whole array sent at every step
    me, total = jax.lax.axis_index(axis), x
    for _ in range(k - 1):
        x = jax.lax.ppermute(x, axis, [(i, (i + 1) % k) for i in range(k)])
        total = total + x
    return jax.lax.dynamic_index_in_dim(total.reshape(k, -1), me, keepdims=False)


@pytest.mark.parametrize("right", [_ring, _ring_fori])
def test_ring_reduce_scatter_right_answers_pass(right, capsys):
    passes(ex.check_ring_reduce_scatter, right, capsys=capsys)


def test_ring_reduce_scatter_reports_what_the_program_moved(capsys):
    ex.check_ring_reduce_scatter(_ring_fori)  # 7 permutes, counted through the loop
    assert "7 collective-permutes along 'ring' of 32 bytes each" in capsys.readouterr().out


@pytest.mark.parametrize(("wrong", "words"), [
    (_follow, r"write what `tpviz\.collectives\.(follow|plan\.plan)` does"),  # the library's ring
    (lambda x, a, k: _ring(x, a, 8), "right on 8 devices .* but on 4 devices"),  # k fixed at 8
    (lambda x, a, k: _ring(x, a, k, devices=8), "right on 8 devices .* but on 4"),  # ring of 8
    (_gather_then_sum, "all-gather .* does not need"),  # the whole array gathered
    (_whole_each_step, "more than one chunk"),  # the whole array at every step
    (lambda x, a, k: jax.lax.psum_scatter(x, a, tiled=True), "reduce-scatter .* does not need"),
    (lambda x, a, k: _ring(x, a, k, send=lambda me, s, k: (me - s) % k), "wrong values"),
])
def test_ring_reduce_scatter_rejects_wrong_programs(wrong, words):
    fails(ex.check_ring_reduce_scatter, wrong, words=words)


def _planned(x, axis, k):  # review: the schedule read from the library's ring plan
    me, chunks = jax.lax.axis_index(axis), x.reshape(k, -1)
    for step in collectives.plan("ring", "reduce-scatter", k, 4 * x.size).moves:
        send, recv = [0] * k, [0] * k
        for m in step:
            send[m.src], recv[m.dst] = m.chunks[0], m.chunks[0]
        piece = jax.lax.dynamic_index_in_dim(chunks, jnp.asarray(send)[me], 0, keepdims=False)
        got = jax.lax.ppermute(piece, axis, [(m.src, m.dst) for m in step])
        at = jnp.asarray(recv)[me]
        chunks = jax.lax.dynamic_update_index_in_dim(
            chunks, jax.lax.dynamic_index_in_dim(chunks, at, 0, keepdims=False) + got, at, 0)
    return jax.lax.dynamic_index_in_dim(chunks, me, keepdims=False)


def _tables(x, axis, k):  # review: the library ring's private step tables
    from tpviz.collectives import run

    me, chunks = jax.lax.axis_index(axis), x.reshape(k, -1)
    plan = object.__new__(collectives.CollectivePlan)  # (never built: the tables are refused)
    for pairs, _, _, send, recv in run._tables(plan):
        got = jax.lax.ppermute(jax.lax.dynamic_index_in_dim(chunks, jnp.asarray(send)[me], 0,
                                                            keepdims=False), axis, pairs)
        at = jnp.asarray(recv)[me]
        chunks = jax.lax.dynamic_update_index_in_dim(
            chunks, jax.lax.dynamic_index_in_dim(chunks, at, 0, keepdims=False) + got, at, 0)
    return jax.lax.dynamic_index_in_dim(chunks, me, keepdims=False)


@pytest.mark.parametrize(("wrong", "words"), [
    # the chapter's axis name written in: the check's ring has another name
    (lambda x, a, k: _ring(x, "X", k), "unbound axis name: X"),
    (_planned, r"write what `tpviz\.collectives\.plan\.plan` does"),
    (_tables, r"write what `tpviz\.collectives\.run\._tables` does"),
])
def test_ring_reduce_scatter_rejects_what_passed_the_review(wrong, words):
    """Review (issue 39): an axis name written in (the check's axis was the chapter's "X"), and
    the ring's schedule taken from the library's plan or its private tables, passed."""
    fails(ex.check_ring_reduce_scatter, wrong, words=words)


# --- 1.6 data-parallel gradients --------------------------------------------------------------

def _pmean_of_grads(p, x, y):  # the book's solution: right under check_vma=False
    return jax.lax.pmean(jax.grad(dp_loss)(p, x, y), "data")


def _grad_of_pmean(p, x, y):  # right under check_vma=True, JAX's default (issue 39)
    return jax.grad(lambda q: jax.lax.pmean(dp_loss(q, x, y), "data"))(p)


def _this_devices_copy(p, x, y):  # right under both: as collectives.dp_step_shard_map does
    return jax.lax.pmean(jax.grad(dp_loss)(tpviz.compat.pvary(p, "data"), x, y), "data")


@pytest.mark.parametrize("right", [_pmean_of_grads, _grad_of_pmean, _this_devices_copy])
def test_dp_gradients_right_answers_pass(right, capsys):
    passes(ex.check_dp_gradients, right, capsys=capsys)


def _from_the_library(p, x, y):  # the gradient recovered from the library's SGD step
    step = collectives.dp_step_shard_map(tpviz.make_mesh((8,), ("data",)), lr=1.0)
    return jax.tree.map(lambda a, b: a - b, p, step(p, x, y))


def _gather_batch(p, x, y):  # the whole batch gathered on every device
    xs, ys = (jax.lax.all_gather(a, "data", tiled=True) for a in (x, y))
    return jax.grad(dp_loss)(p, xs, ys)


def _twice(p, x, y):  # an extra all-reduce
    return jax.lax.pmean(_pmean_of_grads(p, x, y), "data")


def _over_eight(p, x, y):  # the mean over 8 devices, hard-coded
    return jax.tree.map(lambda g: g / 8, jax.lax.psum(jax.grad(dp_loss)(p, x, y), "data"))


@pytest.mark.parametrize(("wrong", "words"), [
    (_from_the_library, r"write what `tpviz\.collectives\.dp_step_shard_map` does"),
    (_over_eight, "right on 8 devices .* but on 4 devices"),  # one mesh size only
    (_gather_batch, "gathers data"),  # the batch held whole
    (_twice, "move 544 bytes in all; the gradient is 272"),  # an extra collective
    (lambda p, x, y: jax.lax.psum(jax.grad(dp_loss)(p, x, y), "data"), "8 times too large"),
    (lambda p, x, y: jax.grad(dp_loss)(p, x, y), "8 times too large|wrong values"),
    (lambda p, x, y: 1 / 0, "raised"),
])
def test_dp_gradients_rejects_wrong_programs(wrong, words):
    fails(ex.check_dp_gradients, wrong, words=words)


def test_dp_gradients_stops_an_endless_loop(monkeypatch):
    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def endless(p, x, y):
        while True:
            pass

    fails(ex.check_dp_gradients, endless, words="stopped")


def test_same_as_big_batch_gives_no_per_key_feedback(capsys):
    passes(ex.check_same_as_big_batch, dict(TRUTH), capsys=capsys)
    one = fails(ex.check_same_as_big_batch, {**TRUTH, "b": True}, words="not all of them")
    two = fails(ex.check_same_as_big_batch, {**TRUTH, "a": False, "c": True}, words="not all")
    assert one == two and "(b)" not in one and "1 of" not in one
    fails(ex.check_same_as_big_batch, {**TRUTH, "a": "yes"}, words="True or False")


def test_dp_gradients_without_a_collective_are_told_where_the_sum_came_from():
    """Review (issue 39): a step with no collective at all was told that "the devices' shares
    are summed": true only because JAX sums the gradient of parameters held whole under
    check_vma=True; the message now says so."""
    message = fails(ex.check_dp_gradients, lambda p, x, y: jax.grad(dp_loss)(p, x, y),
                    words="8 times too large")
    assert "with no collective in your code" in message
