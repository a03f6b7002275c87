"""The ZeRO chapter's build checkers: the solution passes; an all-reduce instead of a
reduce-scatter or an all-gather, gathering whole gradients, the sum instead of the mean, a
raise and an endless loop fail by name; the hint never gives the line."""

import jax
import jax.numpy as jnp
from checking import fails, passes

import tpviz
from tpviz.core import exercises as framework
from tpviz.zero.run import adam

ex = tpviz.exercises
T = 3


def _zero1(reduce="scatter", share="gather", mean=True):
    def step(params, grad, m, v):
        i = jax.lax.axis_index("data")
        if reduce == "scatter":
            g = jax.lax.psum_scatter(grad, "data", tiled=True)
        elif reduce == "all-reduce":
            g = jax.lax.dynamic_slice_in_dim(jax.lax.psum(grad, "data"), i * 8, 8)
        else:  # gather every device's whole gradient, then add locally
            g = jax.lax.dynamic_slice_in_dim(jax.lax.all_gather(grad, "data").sum(0), i * 8, 8)
        g = g / 8 if mean else g
        mine = jax.lax.dynamic_slice_in_dim(params, i * 8, 8)
        new, m, v = adam(mine, g, m, v, T)
        if share == "gather":
            whole = jax.lax.all_gather(new, "data", tiled=True)
        else:  # an all-reduce of the slices placed in zeros
            whole = jax.lax.psum(jnp.zeros_like(params).at[i * 8 + jnp.arange(8)].set(new),
                                 "data")
        return whole, m, v

    return step


def test_zero1_step(capsys, monkeypatch):
    passes(ex.check_zero1_step, _zero1(), capsys=capsys)
    fails(ex.check_zero1_step, _zero1(reduce="all-reduce"), words="right values, but .*all-reduce")
    fails(ex.check_zero1_step, _zero1(share="all-reduce"), words="right values, but .*all-reduce")
    fails(ex.check_zero1_step, _zero1(reduce="gather"), words="more bytes than one")
    fails(ex.check_zero1_step, _zero1(mean=False), words="wrong values")
    fails(ex.check_zero1_step, lambda p, g, m, v: (p, m), words="raised|three arrays")

    def raises(p, g, m, v):
        raise KeyError("oops")

    fails(ex.check_zero1_step, raises, words="raised")
    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def endless(p, g, m, v):
        while True:
            pass

    fails(ex.check_zero1_step, endless, words="stopped")


def test_grad_reduce_scatter_hint_gives_no_line():
    message = fails(ex.check_grad_reduce_scatter, lambda g: jax.lax.psum(g, "data") / 8,
                    words="all-reduce")
    assert "psum_scatter" not in message and "tiled" not in message
    message = fails(ex.check_grad_reduce_scatter,
                    lambda g: jax.lax.dynamic_slice_in_dim(jax.lax.psum(g, "data"),
                                                           jax.lax.axis_index("data") * 8, 8) / 8,
                    words="right values, but .*all-reduce")
