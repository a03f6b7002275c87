"""The collectives chapter's build checker for data-parallel gradients, and the true/false check
that gives no per-key feedback."""

import jax
from checking import fails, passes

import tpviz
from tpviz.collectives.exercises import TRUTH, dp_loss
from tpviz.core import exercises as framework

ex = tpviz.exercises


def _right(params, x, y):
    return jax.lax.pmean(jax.grad(dp_loss)(params, x, y), "data")


def test_dp_gradients(capsys, monkeypatch):
    passes(ex.check_dp_gradients, _right, capsys=capsys)
    fails(ex.check_dp_gradients, lambda p, x, y: jax.lax.psum(jax.grad(dp_loss)(p, x, y), "data"),
          words="8 times too large")

    def twice(p, x, y):  # right values, an extra all-reduce: twice the gradient's bytes
        g = jax.lax.pmean(jax.grad(dp_loss)(p, x, y), "data")
        return jax.lax.pmean(g, "data")

    fails(ex.check_dp_gradients, twice, words="right values, but the program all-reduces")

    def gather_batch(p, x, y):  # right values, gathers the whole batch instead
        xs = jax.lax.all_gather(x, "data", tiled=True)
        ys = jax.lax.all_gather(y, "data", tiled=True)
        return jax.grad(dp_loss)(p, xs, ys)

    fails(ex.check_dp_gradients, gather_batch, words="gathers data")
    fails(ex.check_dp_gradients, lambda p, x, y: jax.grad(dp_loss)(p, x, y),
          words="wrong values")  # no communication: one device's share
    fails(ex.check_dp_gradients, lambda p, x, y: 1 / 0, words="raised")
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
