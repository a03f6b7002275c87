"""The 2D-mesh chapter's checkers: the best mesh shape rejects the four wrong cost models of
issue 26, away from ties, and the library's search; the last step with a LayerNorm (6.3) and the
whole 2D MLP built by hand (6.6) run on the 4×2 and 2×4 meshes on the harness: the book's
solutions pass, the library's 2D MLP is out of reach, and wrong programs written as a learner
would fail with a message that names the mistake."""

import math

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes

import tpviz
from tpviz.core import exercises as framework
from tpviz.mesh2d import choose, run
from tpviz.mesh2d.exercises import BEST_CASES
from tpviz.mesh2d.plan import plan

ex = tpviz.exercises


def _shapes(b, d, f, n):  # the learner's own list of shapes that divide the sizes
    return [(nx, n // nx) for nx in range(1, n + 1) if n % nx == 0 and b % nx == 0
            and d % nx == 0 and d % (n // nx) == 0 and f % (n // nx) == 0]


def _model(weights=1.0, ring=True):
    """A cost model for best_shape: bytes per device per training step in bf16 (2 bytes), the
    right one with weights=1 and ring=True."""
    def sent(b, d, f, nx, ny):
        act = ((ny - 1) / ny if ring else 1) * b * d / nx
        wts = ((nx - 1) / nx if ring else 1) * d * f / ny
        return 2 * 2 * 2 * (act + weights * wts)

    def best_shape(b, d, f, n):
        nx, ny = min(_shapes(b, d, f, n), key=lambda s: sent(b, d, f, *s))
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


def test_best_mesh_refuses_the_librarys_search():
    fails(ex.check_best_mesh, lambda b, d, f, n: (choose.best_mesh(b, d, f, n), 0.0),
          words=r"write what `tpviz\.mesh2d\.best_mesh` does")


# --- 6.3 the last step, with a LayerNorm ------------------------------------------------------

def _scatter(partial):
    return jax.lax.psum_scatter(partial, "model", scatter_dimension=1, tiled=True)


def _normalise(out, total, squares, d):
    mean, square = total / d, squares / d
    return (out - mean) / jnp.sqrt(square - mean**2 + 1e-5)


def _finish(partial, d=None, n_y=None):
    """The book's solution; ``d`` or ``n_y`` hard-coded make one-size answers."""
    out = _scatter(partial)
    d = d or (out.shape[1] * n_y if n_y else partial.shape[1])
    stats = jax.lax.psum(jnp.stack([out.sum(1), (out**2).sum(1)], axis=1), "model")
    return _normalise(out, stats[:, :1], stats[:, 1:], d)


def _two_pass(partial):  # the mean first, then the variance around it: also right
    out, d = _scatter(partial), partial.shape[1]
    mean = jax.lax.psum(out.sum(1, keepdims=True), "model") / d
    var = jax.lax.psum(((out - mean) ** 2).sum(1, keepdims=True), "model") / d
    return (out - mean) / jnp.sqrt(var + 1e-5)


def _rows_whole(partial):  # every row made whole with an all-reduce, normalised, then sliced
    y = jax.lax.psum(partial, "model")
    n = (y - y.mean(1, keepdims=True)) / jnp.sqrt(y.var(1, keepdims=True) + 1e-5)
    c = y.shape[1] // jax.lax.axis_size("model")
    return jax.lax.dynamic_slice_in_dim(n, jax.lax.axis_index("model") * c, c, 1)


def _rows_gathered(partial):  # the statistics from the rows gathered back along model
    out = _scatter(partial)
    rows = jax.lax.all_gather(out, "model", axis=1, tiled=True)
    return (out - rows.mean(1, keepdims=True)) / jnp.sqrt(rows.var(1, keepdims=True) + 1e-5)


def _library(partial):
    out = run.reduce_scatter(partial)
    stats = jax.lax.psum(jnp.stack([out.sum(1), (out**2).sum(1)], axis=1), "model")
    return _normalise(out, stats[:, :1], stats[:, 1:], partial.shape[1])


FINAL_WRONG = {
    "library": (_library, r"write what `tpviz\.mesh2d\.run\.reduce_scatter` does"),
    "D = 8": (lambda p: _finish(p, d=8), "right on the 4×2 mesh .* but on"),  # the chapter's D
    "two devices of model": (lambda p: _finish(p, n_y=2), "right on the 4×2 mesh .* but on the "
                             "2×4 mesh"),  # right on one mesh shape only
    "rows whole": (_rows_whole, "all-reduce along 'model' of 128 bytes"),
    "rows gathered": (_rows_gathered, "2 all-gathers|all-gather along 'model' .* more than"),
    "no LayerNorm": (_scatter, "wrong values"),
    "local statistics": (lambda p: (lambda o: (o - o.mean(1, keepdims=True)) / jnp.sqrt(
        o.var(1, keepdims=True) + 1e-5))(_scatter(p)), "wrong values"),
}


@pytest.mark.parametrize("right", [_finish, _two_pass])
def test_final_step_right_answers_pass(right, capsys):
    passes(ex.check_final_reduce_scatter, right, capsys=capsys)


@pytest.mark.parametrize("name", sorted(FINAL_WRONG))
def test_final_step_rejects_wrong_programs(name):
    wrong, words = FINAL_WRONG[name]
    hint = fails(ex.check_final_reduce_scatter, wrong, words=words).partition("Hint:")[2]
    assert "psum_scatter" not in hint and "scatter_dimension" not in hint


def test_final_step_stub(capsys):
    def stub(y):
        raise NotImplementedError

    ex.check_final_reduce_scatter(stub)
    assert "not attempted" in capsys.readouterr().out


# --- 6.6 the 2D MLP by hand ------------------------------------------------------------------

def _mlp_2d(x, w1, w2, last=None, n_y=None):
    """The book's solution; ``n_y`` hard-codes the model axis's size where a slice needs it."""
    xg = jax.lax.all_gather(x, "model", axis=1, tiled=True)
    w1g = jax.lax.all_gather(w1, "data", axis=0, tiled=True)
    w2g = jax.lax.all_gather(w2, "data", axis=1, tiled=True)
    partial = jax.nn.relu(xg @ w1g) @ w2g
    if n_y is not None:  # the last step as an all-reduce and a slice of D / n_y columns
        whole = jax.lax.psum(partial, "model")
        c = whole.shape[1] // n_y
        return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index("model") * c, c, 1)
    return (last or _scatter)(partial)


def _weights_gathered_whole(x, w1, w2):  # W1 gathered along both axes, then sliced
    xg = jax.lax.all_gather(x, "model", axis=1, tiled=True)
    w1_all = jax.lax.all_gather(jax.lax.all_gather(w1, "data", axis=0, tiled=True), "model",
                                axis=1, tiled=True)
    cols = w1_all.shape[1] // jax.lax.axis_size("model")
    w1g = jax.lax.dynamic_slice_in_dim(w1_all, jax.lax.axis_index("model") * cols, cols, 1)
    w2g = jax.lax.all_gather(w2, "data", axis=1, tiled=True)
    return _scatter(jax.nn.relu(xg @ w1g) @ w2g)


def _w1_along_model(x, w1, w2):
    xg = jax.lax.all_gather(x, "model", axis=1, tiled=True)
    w1g = jax.lax.all_gather(w1, "model", axis=0, tiled=True)  # the wrong axis
    return _scatter(jax.nn.relu(xg @ w1g) @ jax.lax.all_gather(w2, "data", axis=1, tiled=True))


def _four_columns(x, w1, w2):  # written for the 2×4 mesh: the gathered In cut by hand
    xg = jax.lax.all_gather(x, "model", axis=1).reshape(x.shape[0], 4 * x.shape[1])
    w1g = jax.lax.all_gather(w1, "data", axis=0, tiled=True)
    w2g = jax.lax.all_gather(w2, "data", axis=1, tiled=True)
    return _scatter(jax.nn.relu(xg @ w1g) @ w2g)


MLP_WRONG = {
    "library": (run.mlp, r"write what `tpviz\.mesh2d\.run\.mlp` does"),
    "library inside": (lambda x, w1, w2: run.mlp(x, w1, w2) * 1.0, r"`tpviz\.mesh2d\.run\.mlp`"),
    "all-reduce last": (lambda x, w1, w2: _mlp_2d(x, w1, w2, n_y=jax.lax.axis_size("model")),
                        "all-reduce .* does not need"),
    "weights whole": (_weights_gathered_whole, "all-gather .* more than|all-gathers where"),
    "four model devices": (_four_columns, "right on the 2×4 mesh .* but on the 4×2 mesh"),
    "wrong axis": (_w1_along_model, "raised|wrong values"),
    "no reduce-scatter": (lambda x, w1, w2: _mlp_2d(x, w1, w2, last=lambda p: p[:, :p.shape[1]
                                                                                 // 4]),
                          "wrong values|block of shape"),
}


def test_mlp2d_solution_passes(capsys):
    passes(ex.check_mlp2d, _mlp_2d, capsys=capsys)


def test_mlp2d_passes_another_right_program(capsys):
    """Review: the weights gathered first, einsum, relu written with where: right."""
    def mlp(x, w1, w2):
        w2g = jax.lax.all_gather(w2, "data", axis=1, tiled=True)
        w1g = jax.lax.all_gather(w1, "data", axis=0, tiled=True)
        h = jnp.einsum("bd,df->bf", jax.lax.all_gather(x, "model", axis=1, tiled=True), w1g)
        return _scatter(jnp.einsum("bf,fd->bd", jnp.where(h > 0, h, 0.0), w2g))

    passes(ex.check_mlp2d, mlp, capsys=capsys)


@pytest.mark.parametrize("name", sorted(MLP_WRONG))
def test_mlp2d_rejects_wrong_programs(name):
    wrong, words = MLP_WRONG[name]
    fails(ex.check_mlp2d, wrong, words=words)


def _everything_everywhere(x, w1, w2):  # every array gathered whole, Out's block sliced
    def whole(a, first, second):
        return jax.lax.all_gather(jax.lax.all_gather(a, first[0], axis=first[1], tiled=True),
                                  second[0], axis=second[1], tiled=True)

    out = jax.nn.relu(whole(x, ("model", 1), ("data", 0)) @ whole(w1, ("data", 0), ("model", 1))
                      ) @ whole(w2, ("data", 1), ("model", 0))
    (b, d), i, j = x.shape, jax.lax.axis_index("data"), jax.lax.axis_index("model")
    return jax.lax.dynamic_slice(out, (i * b, j * d), (b, d))


def test_mlp2d_names_the_missing_collective_once():
    """Review (issue 39): the message read "no reduce-scatter of reduce-scatter Out' along
    model": the plan's description used as the operand's name."""
    message = fails(ex.check_mlp2d, _everything_everywhere, words="no reduce-scatter of Out'")
    assert "of reduce-scatter" not in message


def test_mlp2d_stops_an_endless_loop(monkeypatch):
    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def endless(x, w1, w2):
        while True:
            pass

    fails(ex.check_mlp2d, endless, words="stopped")
