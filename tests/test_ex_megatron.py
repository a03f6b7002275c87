"""The Megatron chapter's build checkers: the solution passes; wrong implementations (an extra
collective, more bytes than the plan, the wrong axis, a raise, an endless loop) fail by name."""

import jax
from checking import fails, passes

import tpviz
from tpviz.core import exercises as framework

ex = tpviz.exercises


def _conjugates(g_backward):
    @jax.custom_vjp
    def f(x):
        return x

    f.defvjp(lambda x: (x, None), lambda _, ct: (jax.lax.psum(ct, "model"),))

    @jax.custom_vjp
    def g(x):
        return jax.lax.psum(x, "model")

    g.defvjp(lambda x: (g(x), None), lambda _, ct: (g_backward(ct),))
    return f, g


def test_conjugates_rejects_psum_over_n_in_g_backward(capsys):
    passes(ex.check_conjugates, *_conjugates(lambda ct: ct), capsys=capsys)
    # right values, but a step makes three all-reduces instead of two (issue 26)
    fails(ex.check_conjugates, *_conjugates(lambda ct: jax.lax.psum(ct, "model") / 4),
          words="3 all-reduces instead of 2: an extra all-reduce in the backward")


def test_row_parallel_reads_the_program(capsys):
    def gathered(h, w):  # right values, two all-gathers instead of one all-reduce
        return (jax.lax.all_gather(h, "model", axis=1, tiled=True)
                @ jax.lax.all_gather(w, "model", axis=0, tiled=True))

    fails(ex.check_row_parallel, gathered, words="right values, but .* all-gather")


def _sp(gather_axis=0, reduce="scatter"):
    def sp_mlp(x, w1, w2):
        tokens = jax.lax.all_gather(x, "model", axis=gather_axis, tiled=True)
        partial = jax.nn.gelu(tokens @ w1) @ w2
        if reduce == "scatter":
            return jax.lax.psum_scatter(partial, "model", scatter_dimension=0, tiled=True)
        whole = jax.lax.psum(partial, "model")
        i = jax.lax.axis_index("model")
        return jax.lax.dynamic_slice_in_dim(whole, i * x.shape[0], x.shape[0], axis=0)

    return sp_mlp


def test_sequence_parallel(capsys, monkeypatch):
    passes(ex.check_sequence_parallel, _sp(), capsys=capsys)
    fails(ex.check_sequence_parallel, _sp(reduce="all-reduce"),
          words="right values, but .* all-reduce sends twice the bytes")

    def weights_gathered(x, w1, w2):  # right values: gathers the weights, not the tokens
        w1 = jax.lax.all_gather(w1, "model", axis=1, tiled=True)
        return jax.nn.gelu(x @ w1) @ jax.lax.all_gather(w2, "model", axis=0, tiled=True)

    fails(ex.check_sequence_parallel, weights_gathered, words="other than the .T, H. activations")
    fails(ex.check_sequence_parallel, _sp(gather_axis=1), words="raised")  # the wrong axis
    fails(ex.check_sequence_parallel, lambda x, w1, w2: jax.nn.gelu(x @ w1) @ w2,
          words="wrong values")  # no collective: one device's partial sums

    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def endless(x, w1, w2):
        while True:
            pass

    fails(ex.check_sequence_parallel, endless, words="stopped")

    def stub(x, w1, w2):
        raise NotImplementedError

    ex.check_sequence_parallel(stub)
    assert "not attempted" in capsys.readouterr().out
