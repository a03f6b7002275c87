"""The 2D-mesh chapter's checkers: the best mesh shape rejects the four wrong cost models of
issue 26, away from ties; the whole 2D MLP built by hand is read from the compiled program."""

import math

import jax
import pytest
from checking import fails, passes

import tpviz
from tpviz.core import exercises as framework
from tpviz.mesh2d import choose, run
from tpviz.mesh2d.exercises import BEST_CASES
from tpviz.mesh2d.plan import plan

ex = tpviz.exercises


def _model(weights=1.0, ring=True):
    """A cost model for best_shape: bytes per device per training step in bf16 (2 bytes), the
    right one with weights=1 and ring=True."""
    def sent(b, d, f, nx, ny):
        act = ((ny - 1) / ny if ring else 1) * b * d / nx
        wts = ((nx - 1) / nx if ring else 1) * d * f / ny
        return 2 * 2 * 2 * (act + weights * wts)

    def best_shape(b, d, f, n):
        nx, ny = min(choose.meshes(b, d, f, n), key=lambda s: sent(b, d, f, *s))
        return (nx, ny), sent(b, d, f, nx, ny)

    return best_shape


def _rounded(b, d, f, n):  # sqrt(B N / F) rounded to a power of two; divisibility unchecked
    nx = max(1, min(n, 2 ** round(math.log2(math.sqrt(b * n / f)))))
    ny = n // nx
    return (nx, ny), 8 * ((ny - 1) / ny * b * d / nx + (nx - 1) / nx * d * f / ny)


def test_best_mesh_cases_are_away_from_ties():
    for b, d, f, n in BEST_CASES:
        costs = sorted(plan(b, d, f, s, "bf16").sent() for s in choose.meshes(b, d, f, n))
        assert costs[1] >= 1.08 * costs[0]


@pytest.mark.parametrize("weights", [0.5, 1.5])
def test_a_factor_in_the_weights_changes_the_shape_in_some_case(weights):
    right, wrong = _model(), _model(weights=weights)
    assert any(right(*c)[0] != wrong(*c)[0] for c in BEST_CASES)


def test_the_bytes_formula_is_the_plans():
    for b, d, f, n in BEST_CASES:
        shape, sent = _model()(b, d, f, n)
        assert sent == pytest.approx(plan(b, d, f, shape, "bf16").sent(), rel=1e-12)


def test_best_mesh_rejects_the_four_wrong_cost_models(capsys):  # issue 26: each passed before
    passes(ex.check_best_mesh, _model(), capsys=capsys)
    fails(ex.check_best_mesh, _model(weights=0.5), words="shape is right, but|another shape")
    fails(ex.check_best_mesh, _model(weights=1.5), words="shape is right, but|another shape")
    fails(ex.check_best_mesh, _model(ring=False), words="shape is right, but")
    fails(ex.check_best_mesh, _rounded, words="does not divide the sizes")
    fails(ex.check_best_mesh, lambda b, d, f, n: (n, 1), words=r"return \(\(data, model\)")


def _all_reduce_last(x, w1, w2):
    def final(partial):
        i = jax.lax.axis_index("model")
        whole = jax.lax.psum(partial, "model")
        return jax.lax.dynamic_slice_in_dim(whole, i * (whole.shape[1] // 4), whole.shape[1] // 4,
                                            axis=1)

    return run.mlp(x, w1, w2, final)


def _weights_gathered_whole(x, w1, w2):
    xg = jax.lax.all_gather(x, "model", axis=1, tiled=True)
    w1_all = jax.lax.all_gather(jax.lax.all_gather(w1, "data", axis=0, tiled=True), "model",
                                axis=1, tiled=True)
    cols = w1_all.shape[1] // 4
    w1g = jax.lax.dynamic_slice_in_dim(w1_all, jax.lax.axis_index("model") * cols, cols, 1)
    w2g = jax.lax.all_gather(w2, "data", axis=1, tiled=True)
    return run.reduce_scatter(jax.nn.relu(xg @ w1g) @ w2g)


def _w1_along_model(x, w1, w2):
    xg = jax.lax.all_gather(x, "model", axis=1, tiled=True)
    w1g = jax.lax.all_gather(w1, "model", axis=0, tiled=True)  # the wrong axis
    return run.reduce_scatter(jax.nn.relu(xg @ w1g) @ jax.lax.all_gather(w2, "data", axis=1,
                                                                         tiled=True))


def test_mlp2d(capsys, monkeypatch):
    passes(ex.check_mlp2d, run.mlp, capsys=capsys)
    fails(ex.check_mlp2d, _all_reduce_last, words="an all-reduce sends twice the bytes")
    fails(ex.check_mlp2d, _weights_gathered_whole, words="more bytes than the step table")
    fails(ex.check_mlp2d, _w1_along_model, words="raised")

    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def endless(x, w1, w2):
        while True:
            pass

    fails(ex.check_mlp2d, endless, words="stopped")


def test_final_reduce_scatter_hint_does_not_give_the_line():
    message = fails(ex.check_final_reduce_scatter, lambda y: jax.lax.psum(y, "model"),
                    words="shape")
    assert "psum_scatter" not in message and "scatter_dimension" not in message
