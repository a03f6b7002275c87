"""Review of chapter 3's build 3.6 (issue 39's mutation pass): FSDP's layer in both directions,
``fsdp_layer(x_rows, w_rows, dout_rows) -> (out_rows, dw_rows)``. The book's solution and other
right programs pass; wrong programs written as a learner would (JAX's automatic transpose, the
library's program, the gradient all-reduced then sliced, an operand gathered whole, sizes or the
device count written in, no reduction, an average for the sum, the wrong dimension scattered)
fail with words that name the mistake. The old 3.6 (``check_fsdp_matmul``) stays tested in
tests/test_ex_matmul.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from checking import book_solution, fails, passes, stub

import tpviz
from tpviz import matmul

ex = tpviz.exercises


def _gather(w):
    return jax.lax.all_gather(w, "X", axis=0, tiled=True)


def _scatter(partial):
    return jax.lax.psum_scatter(partial, "X", scatter_dimension=0, tiled=True)


def _mine(a):  # this device's rows of a whole [D, F] array
    rows = a.shape[0] // jax.lax.axis_size("X")
    return jax.lax.dynamic_slice_in_dim(a, jax.lax.axis_index("X") * rows, rows, 0)


def right(x, w, d):
    return x @ _gather(w), _scatter(x.T @ d)


def _vjp(x, w, d):  # JAX's transpose of the all-gather finds the reduce-scatter for you
    out, back = jax.vjp(lambda w: x @ _gather(w), w)
    return out, back(d)[0]


def _grad(x, w, d):
    return x @ _gather(w), jax.grad(lambda w: jnp.sum((x @ _gather(w)) * d))(w)


def _library(x, w, d):
    plan = matmul.plan((16, 32), (32, 24), "In[B_X, D]", "W1[D_X, F]", {"X": 8})
    return matmul.explicit(plan, None)(x, w), _scatter(x.T @ d)


def _all_reduce(x, w, d):  # the whole gradient on every device, then its own rows kept
    return x @ _gather(w), _mine(jax.lax.psum(x.T @ d, "X"))


def _batch_gathered(x, w, d):  # In and dOut gathered whole, the gradient computed in full
    x_all, d_all = _gather(x), _gather(d)
    return x @ _gather(w), _mine(x_all.T @ d_all)


def _eight(x, w, d):  # the device count written in: right on 8 devices only
    partial = (x.T @ d).reshape(8, -1, d.shape[1])
    return x @ _gather(w), jax.lax.psum_scatter(partial, "X", scatter_dimension=0)


def _notebook_sizes(x, w, d):  # the notebook's D = 32 written in
    return x @ _gather(w).reshape(32, -1), _scatter(x.T @ d)


def _no_reduction(x, w, d):  # each device's own part of the batch only
    return x @ _gather(w), _mine(x.T @ d)


def _averaged(x, w, d):  # the mean over the devices, as for data-parallel gradients
    return x @ _gather(w), _scatter(x.T @ d) / jax.lax.axis_size("X")


def _wrong_dimension(x, w, d):  # the gradient scattered along F, not along D
    return x @ _gather(w), jax.lax.psum_scatter(x.T @ d, "X", scatter_dimension=1, tiled=True)


def _transposed(x, w, d):  # dOutᵀ · In: the gradient of W1ᵀ
    return x @ _gather(w), _scatter(d.T @ x)


def _forward_gathers_in(x, w, d):  # the whole batch's Out computed, this device's rows kept
    return _mine(_gather(x) @ _gather(w)), _scatter(x.T @ d)


# --- a second review's learners (rev03): other ways to JAX's transpose, other collectives ------

def _jacrev(x, w, d):  # the Jacobian of ⟨Out, dOut⟩: reverse mode, so the transpose again
    return x @ _gather(w), jax.jacrev(lambda w: jnp.vdot(x @ _gather(w), d))(w)


def _linear_transpose(x, w, d):  # the forward is linear in W1: JAX transposes it
    return x @ _gather(w), jax.linear_transpose(lambda w: x @ _gather(w), w)(d)[0]


def _linearize(x, w, d):  # linearize, then transpose the linear map
    out, f = jax.linearize(lambda w: x @ _gather(w), w)
    return out, jax.linear_transpose(f, w)(d)[0]


def _with_gradients(x, w, d):  # chapter 9's helper: forward and gradients in one program
    out, (dw,) = tpviz.context.run.with_gradients(lambda w: x @ _gather(w))(w, d)
    return out, dw


def _padded_sum(x, w, d):  # W1 "gathered" by an all-reduce of zero-padded blocks
    n, rows = jax.lax.axis_size("X"), w.shape[0]
    padded = jnp.zeros((rows * n, w.shape[1]), w.dtype)
    padded = jax.lax.dynamic_update_slice_in_dim(padded, w, jax.lax.axis_index("X") * rows, 0)
    return x @ jax.lax.psum(padded, "X"), _scatter(x.T @ d)


def _ring(x, w, d):  # the reduce-scatter by hand: N - 1 shifts of one block, each added to
    n, i = jax.lax.axis_size("X"), jax.lax.axis_index("X")
    partial = x.T @ d
    rows = partial.shape[0] // n

    def block(k):
        return jax.lax.dynamic_slice_in_dim(partial, k * rows, rows, 0)

    acc = block((i - 1) % n)
    for s in range(1, n):
        acc = jax.lax.ppermute(acc, "X", [(j, (j + 1) % n) for j in range(n)])
        acc = acc + block((i - 1 - s) % n)
    return x @ _gather(w), acc


def _whole_gradient(x, w, d):  # all of dW1 on every device: summed, never split
    return x @ _gather(w), jax.lax.psum(x.T @ d, "X")


def _ones(x, w, d):  # the gradient of sum(Out): dOut taken as ones
    return x @ _gather(w), _scatter(x.T @ jnp.ones_like(d))


WRONG = {
    "jax.vjp": (_vjp, r"write what `jax\.vjp` does"),
    "jax.grad": (_grad, r"write what `jax\.grad` does"),
    "the library's program": (_library, r"write what `tpviz\.matmul\.explicit` does"),
    "all-reduce then slice": (_all_reduce, "all-reduce .* does not need"),
    "In and dOut gathered whole": (_batch_gathered, "all-gather"),
    "8 devices written in": (_eight, "right on 8 devices .* but on 4 devices"),
    "D = 32 written in": (_notebook_sizes, r"right on 8 devices with B = 16, D = 32, F = 24, "
                          "but on"),
    "no reduction": (_no_reduction, "wrong values"),
    "averaged": (_averaged, "8 times too small: .* averaged"),
    "scattered along F": (_wrong_dimension, r"block of shape \(32, 3\) for dW1"),
    "transposed": (_transposed, r"block of shape \(3, 32\) for dW1"),
    "In gathered for the forward": (_forward_gathers_in, "2 all-gathers where"),
    "jax.jacrev": (_jacrev, r"write what `jax\.vjp` does"),
    "jax.linear_transpose": (_linear_transpose, r"write what `jax\.linear_transpose` does"),
    "jax.linearize, then transposed": (_linearize, r"write what `jax\.linear_transpose`"),
    "chapter 9's with_gradients": (_with_gradients, r"write what `jax\.vjp` does"),
    "W1 gathered by an all-reduce": (_padded_sum, "all-reduce .* does not need"),
    "reduce-scatter by permutes": (_ring, "collective-permute .* does not need"),
    "dW1 whole": (_whole_gradient, r"block of shape \(32, 24\) for dW1"),
    "dOut ignored": (_ones, "dW1 has the right shape but wrong values"),
}


def test_book_solution_passes_and_reports_both_collectives(capsys):
    ex.check_fsdp_layer(book_solution("03_sharded_matmul.ipynb", "fsdp_layer"))
    out = capsys.readouterr().out
    # first case: D = 32, F = 24 in float32: W1 is 3,072 bytes, and so is the partial dW1
    assert "an all-gather along 'X' of 3,072 bytes" in out
    assert "a reduce-scatter along 'X' of 3,072 bytes" in out
    assert "4 and 8 devices" in out


def test_right_variants_pass(capsys):
    """jax.lax.all_gather (not the invariant one), einsum, and an untiled reduce-scatter of the
    gradient reshaped by the devices read from the axis."""
    passes(ex.check_fsdp_layer, right, capsys=capsys)

    def untiled(x, w, d):
        n = jax.lax.axis_size("X")
        partial = jnp.einsum("bd,bf->df", x, d).reshape(n, -1, d.shape[1])
        return jnp.einsum("bd,df->bf", x, _gather(w)), jax.lax.psum_scatter(partial, "X")

    passes(ex.check_fsdp_layer, untiled, capsys=capsys)


def test_more_right_variants_pass(capsys):
    """An untiled all-gather reshaped to W1's rows, and the gradient's transpose scattered along
    its dimension 1 (D) and transposed back; the chapter's all_gather_invariant with the axis
    named as a tuple and jnp.dot."""
    def untiled_gather(x, w, d):
        w_all = jax.lax.all_gather(w, "X").reshape(-1, w.shape[1])  # [N, D/N, F] -> [D, F]
        dw_t = jax.lax.psum_scatter((x.T @ d).T, "X", scatter_dimension=1, tiled=True)
        return x @ w_all, dw_t.T

    def invariant(x, w, d):
        w_all = tpviz.compat.all_gather_invariant(w, "X", axis=0, tiled=True)
        partial = jnp.einsum("bd,bf->df", x, d)
        return jnp.dot(x, w_all), jax.lax.psum_scatter(partial, ("X",), scatter_dimension=0,
                                                        tiled=True)

    passes(ex.check_fsdp_layer, untiled_gather, capsys=capsys)
    passes(ex.check_fsdp_layer, invariant, capsys=capsys)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_program_fails(name):
    wrong, words = WRONG[name]
    fails(ex.check_fsdp_layer, wrong, words=words)


def test_the_old_checker_still_takes_the_old_answer(capsys):
    """The contract: check_fsdp_matmul keeps its name and signature (the old 3.6's answer)."""
    passes(ex.check_fsdp_matmul, lambda x, w: x @ _gather(w), capsys=capsys)


def test_jax_autodiff_stays_usable_after_the_check():
    """The watch on jax.vjp and jax.grad ends with the check, and watched only them: every
    other JAX call (jit, shard_map, the collectives) ran inside it."""
    fails(ex.check_fsdp_layer, _vjp, words="jax.vjp")
    grad = jax.grad(lambda v: jnp.sum(v ** 2))(jnp.arange(3.0))
    np.testing.assert_allclose(grad, [0.0, 2.0, 4.0])


def test_fsdp_layer_release_stub_is_not_attempted(capsys):
    def fsdp_layer(x_rows, w_rows, dout_rows):  # the release's stub
        raise NotImplementedError("exercise not attempted yet")

    stub(ex.check_fsdp_layer, fsdp_layer, capsys=capsys)
