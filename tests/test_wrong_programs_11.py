"""Review of chapter 11's build checkers (issue 39's mutation pass): the MLP block on a data ×
tensor mesh (11.6) and ZeRO's gradient reduction over data (11.7). The right programs pass; wrong
programs written as a learner would (right on one device's copy only, gelu after the sum, an extra
all-reduce, the sum in bf16, the mean for the sum, the halves swapped) fail. Programs not
repeated from tests/test_ex_together.py."""

import jax
import jax.numpy as jnp
import pytest
from checking import book_solution, fails, passes
from test_ex_together import block, reduce_gradient

import tpviz
from tpviz import megatron, mesh2d, zero

ex = tpviz.exercises


# --- 11.6 the MLP block --------------------------------------------------------------------------

def _one_copy(x, w1, w2):  # the sum right on the first tensor device, its own share elsewhere
    partial = jax.nn.gelu(x @ w1) @ w2
    y = jax.lax.psum(partial, "tensor")
    return jnp.where(jax.lax.axis_index("tensor") == 0, y, partial)


def _gelu_after(x, w1, w2):  # the partial products summed first, gelu at the end
    return jax.nn.gelu(jax.lax.psum(x @ w1 @ w2, "tensor"))


def _data_logged(x, w1, w2):  # right, plus a loss all-reduced over data "for logging"
    y = block(x, w1, w2)
    return y + 0.0 * jax.lax.psum(jnp.sum(y), "data")


def _bf16(x, w1, w2):  # the all-reduce in bfloat16
    part = (jax.nn.gelu(x @ w1) @ w2).astype(jnp.bfloat16)
    return jax.lax.psum(part, "tensor").astype(x.dtype)


def _hidden_gathered(x, w1, w2):  # h's columns gathered, then the whole W2 product sliced
    h = jax.lax.all_gather(jax.nn.gelu(x @ w1), "tensor", axis=1, tiled=True)  # [B/d, F]
    w2s = jax.lax.all_gather(w2, "tensor", axis=0, tiled=True)
    return h @ w2s


def _rows_gathered(x, w1, w2):  # every data shard's rows gathered, the block run, own rows kept
    xs = jax.lax.all_gather(x, "data", axis=0, tiled=True)
    y = jax.lax.psum(jax.nn.gelu(xs @ w1) @ w2, "tensor")
    rows = x.shape[0]
    return jax.lax.dynamic_slice_in_dim(y, jax.lax.axis_index("data") * rows, rows, axis=0)


GRID_MLP_WRONG = {
    "rows gathered over data": (_rows_gathered, "all-gather along 'data'|along 'tensor' moves"),
    "chapter 4's row-parallel layer": (
        lambda x, w1, w2: megatron.row_parallel(jax.nn.gelu(x @ w1), w2, "tensor"),
        r"write what `tpviz\.megatron\.row_parallel`"),
    "right on the first tensor device only": (_one_copy, "device|wrong values"),
    "gelu after the sum": (_gelu_after, "wrong values"),
    "a loss all-reduced over data": (_data_logged, "all-reduce along 'data'"),
    "the sum in bf16": (_bf16, "wrong values|bytes"),
    "hidden gathered": (_hidden_gathered, "all-gather"),
}


def test_grid_mlp_right_program_passes(capsys):
    passes(ex.check_grid_mlp, block, capsys=capsys)


@pytest.mark.parametrize("name", sorted(GRID_MLP_WRONG))
def test_grid_mlp_wrong_program_fails(name):
    wrong, words = GRID_MLP_WRONG[name]
    fails(ex.check_grid_mlp, wrong, words=words)


# --- 11.6 the block's step: forward and data-parallel weight gradients --------------------------

block_step = book_solution("11_together.ipynb", "block_step")


def _backward(x, w1, w2, y, n):  # the shared hand-written backward of the wrong programs below
    z = x @ w1
    dy = y / n
    _, back = jax.vjp(jax.nn.gelu, z)
    (dz,) = back(dy @ w2.T)
    return x.T @ dz, jax.nn.gelu(z).T @ dy


def _forward(x, w1, w2):
    return jax.lax.psum(jax.nn.gelu(x @ w1) @ w2, "tensor")


def _step(n_of, sync):  # a step whose mean divides by n_of(x) and whose gradients go by sync
    def step(x, w1, w2):
        y = _forward(x, w1, w2)
        dw1, dw2 = _backward(x, w1, w2, y, n_of(x))
        return y, sync(dw1), sync(dw2)
    return step


def _over_data(g):
    return jax.lax.psum(g, "data")


def _global(x):
    return x.shape[0] * jax.lax.axis_size("data")


def _by_grad(x, w1, w2):  # right too: jax.grad (check_vma=True) adds over data by itself
    n = _global(x)

    def loss(w1, w2):
        y = _forward(x, w1, w2)
        return (y * y).sum() / (2 * n), y

    (dw1, dw2), y = jax.grad(loss, argnums=(0, 1), has_aux=True)(w1, w2)
    return y, dw1, dw2


def _by_grad_and_psum(x, w1, w2):  # jax.grad, and then the data sum again
    y, dw1, dw2 = _by_grad(x, w1, w2)
    return y, _over_data(dw1), _over_data(dw2)


def _weights_gathered(x, w1, w2):  # whole weights gathered over tensor, the shards cut out
    t, k = jax.lax.axis_index("tensor"), w1.shape[1]
    w1s = jax.lax.all_gather(w1, "tensor", axis=1, tiled=True)
    w2s = jax.lax.all_gather(w2, "tensor", axis=0, tiled=True)
    y = jax.nn.gelu(x @ w1s) @ w2s
    dw1, dw2 = _backward(x, w1s, w2s, y, _global(x))
    return (y, _over_data(jax.lax.dynamic_slice_in_dim(dw1, t * k, k, axis=1)),
            _over_data(jax.lax.dynamic_slice_in_dim(dw2, t * k, k, axis=0)))


def _bf16_gradients(g):
    return jax.lax.psum(g.astype(jnp.bfloat16), "data").astype(g.dtype)


GRID_STEP_WRONG = {
    "chapter 4's row-parallel layer": (
        lambda x, w1, w2: (megatron.row_parallel(jax.nn.gelu(x @ w1), w2, "tensor"), w1, w2),
        r"write what `tpviz\.megatron\.row_parallel`"),
    "the mean over this shard's tokens": (_step(lambda x: x.shape[0], _over_data),
                                          "2 times too large: the loss's mean taken over"),
    "d = 2 hard-coded": (_step(lambda x: 2 * x.shape[0], _over_data),
                         r"right on the 2×4 mesh .* but on the 4×2 mesh.*times the right value: check the loss's 1/B"),
    "gradients not added over data": (_step(_global, lambda g: g), "dW1 holds only data replica 0's share"),
    "gradients added over both axes": (
        _step(_global, lambda g: jax.lax.psum(g, ("data", "tensor"))), "wrong values|times"),
    "gradients averaged over data": (
        _step(_global, lambda g: jax.lax.pmean(g, "data")), "2 times too small"),
    "jax.grad, then a psum over data": (_by_grad_and_psum, "times too large"),
    "weights gathered over tensor": (_weights_gathered, "all-gather along"),
    "gradients summed in bf16": (_step(_global, _bf16_gradients), "wrong values|bytes"),
}


def test_grid_step_book_solution_passes(capsys):
    passes(ex.check_grid_mlp_step, block_step, capsys=capsys)


def test_grid_step_by_grad_passes(capsys):
    """jax.grad inside the shard_map (check_vma=True) transposes the forward's psum and adds a
    data-invariant weight's gradient over data: right, with the same compiled collectives."""
    passes(ex.check_grid_mlp_step, _by_grad, capsys=capsys)


@pytest.mark.parametrize("name", sorted(GRID_STEP_WRONG))
def test_grid_step_wrong_program_fails(name):
    wrong, words = GRID_STEP_WRONG[name]
    fails(ex.check_grid_mlp_step, wrong, words=words)


def test_grid_step_reference_is_jax_grad():
    """The checker's hand-written reference against jax.grad of L = ||y||² / 2B on one device."""
    import numpy as np

    from tpviz.together.builds import _mlp_inputs, _step_reference

    x, w1, w2 = _mlp_inputs({"B": 6, "H": 4, "F": 10}, np.random.default_rng(3))

    def loss(w1, w2):
        y = jax.nn.gelu(x @ w1) @ w2
        return (y * y).sum() / (2 * x.shape[0])

    want = (jax.nn.gelu(x @ w1) @ w2, *jax.grad(loss, argnums=(0, 1))(w1, w2))
    for got, w in zip(_step_reference(x, w1, w2), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_old_block_answers_the_old_check(capsys):
    """The contract: check_grid_mlp keeps its name, its call and its answer."""
    passes(ex.check_grid_mlp, block, capsys=capsys)


# --- 11.7 ZeRO's reduction over data -----------------------------------------------------------

def _by_all_to_all(g):  # right too: each replica sends the half the other keeps, adds the two
    halves = g.reshape(2, g.shape[0] // 2, g.shape[1])
    got = jax.lax.all_to_all(halves, "data", split_axis=0, concat_axis=0, tiled=True)
    return got[0] + got[1]


def _mean(g):  # averaged over the replicas: the sum was asked
    return jax.lax.psum_scatter(g, "data", scatter_dimension=0, tiled=True) / 2


def _swapped(g):  # replica 0 keeps the second half
    h = g.shape[0] // 2
    return jax.lax.psum_scatter(jnp.concatenate([g[h:], g[:h]]), "data", scatter_dimension=0,
                                tiled=True)


def _tensor_logged(g):  # right, plus a norm all-reduced over tensor "for clipping"
    out = reduce_gradient(g)
    return out + 0.0 * jax.lax.psum(jnp.sum(out * out), "tensor")


def _bf16_scatter(g):  # the reduce-scatter in bfloat16
    return jax.lax.psum_scatter(g.astype(jnp.bfloat16), "data", scatter_dimension=0,
                                tiled=True).astype(g.dtype)


def _whole_exchanged(g):  # the whole g to the other replica by all-to-all, then a slice
    r, h = jax.lax.axis_index("data"), g.shape[0] // 2
    got = jax.lax.all_to_all(jnp.stack([g, g]), "data", split_axis=0, concat_axis=0, tiled=True)
    return jax.lax.dynamic_slice_in_dim(got[0] + got[1], r * h, h, axis=0)


def _replica_of_eight(g):  # the replica read off the chapter's 8-device grid: 4 per replica
    r, h = jax.lax.axis_index(("data", "tensor")) // 4, g.shape[0] // 2
    mine = jax.lax.dynamic_slice_in_dim(g, r * h, h, axis=0)
    theirs = jax.lax.dynamic_slice_in_dim(g, (1 - r) * h, h, axis=0)
    return mine + jax.lax.ppermute(theirs, "data", [(0, 1), (1, 0)])


GRID_SCATTER_WRONG = {
    "right on the 2 × 4 mesh only": (_replica_of_eight,
                                     "right on the 2×4 mesh .* but on the 2×2 mesh"),
    "chapter 4's g": (lambda g: jax.lax.dynamic_slice_in_dim(
        megatron.reduce_from_tp_region(g, "data"), jax.lax.axis_index("data") * (g.shape[0] // 2),
        g.shape[0] // 2, axis=0), r"write what `tpviz\.megatron\.reduce_from_tp_region`"),
    "whole g exchanged by all-to-all": (_whole_exchanged, "all-to-all.* of 512 bytes"),
    "the mean": (_mean, "wrong values"),
    "halves swapped": (_swapped, "wrong values"),
    "a norm all-reduced over tensor": (_tensor_logged, "along"),
    "in bf16": (_bf16_scatter, "wrong values|bytes"),
}


def test_grid_reduce_scatter_right_program_passes(capsys):
    passes(ex.check_grid_reduce_scatter, reduce_gradient, capsys=capsys)


def test_grid_reduce_scatter_by_all_to_all_passes(capsys):
    """One all-to-all of the halves sends what a reduce-scatter sends (half of g per device):
    the prompt asks only that it send no more than it must."""
    passes(ex.check_grid_reduce_scatter, _by_all_to_all, capsys=capsys)


@pytest.mark.parametrize("name", sorted(GRID_SCATTER_WRONG))
def test_grid_reduce_scatter_wrong_program_fails(name):
    wrong, words = GRID_SCATTER_WRONG[name]
    fails(ex.check_grid_reduce_scatter, wrong, words=words)


# --- 11.7 a ZeRO step on the data axis ------------------------------------------------------------

zero_step = book_solution("11_together.ipynb", "zero_step")
LR, BETA = 0.1, 0.9


def _rows(w, rows):  # this replica's rows of w
    return jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index("data") * rows, rows, axis=0)


def _sgd(w, m, mean):  # the update on this replica's rows, then every row to every replica
    m = BETA * m + mean
    mine = _rows(w, m.shape[0]) - LR * m
    return jax.lax.all_gather(mine, "data", axis=0, tiled=True), m


def _scattered(g, axis="data"):
    return jax.lax.psum_scatter(g, axis, scatter_dimension=0, tiled=True)


def _zero_mean_first(w, m, g):  # right too: the mean taken before the scatter
    d = jax.lax.axis_size("data")
    return _sgd(w, m, _scattered(g / d))


def _all_reduced(w, m, g):  # psum, then this replica's rows sliced out
    mean = jax.lax.psum(g, "data") / jax.lax.axis_size("data")
    return _sgd(w, m, _rows(mean, m.shape[0]))


def _state_gathered(w, m, g):  # the momentum gathered, the whole parameter updated everywhere
    mean = jax.lax.pmean(g, "data")
    whole = BETA * jax.lax.all_gather(m, "data", axis=0, tiled=True) + mean
    return w - LR * whole, _rows(whole, m.shape[0])


def _not_gathered(w, m, g):  # own rows updated in place, the other replicas' rows left stale
    m = BETA * m + _scattered(g) / jax.lax.axis_size("data")
    start = jax.lax.axis_index("data") * m.shape[0]
    mine = _rows(w, m.shape[0]) - LR * m
    return jax.lax.dynamic_update_slice_in_dim(w, mine, start, axis=0), m


def _gradient_gathered(w, m, g):  # every replica's gradient gathered, summed, rows sliced
    d, rows = jax.lax.axis_size("data"), m.shape[0]
    every = jax.lax.all_gather(g, "data", axis=0, tiled=False).sum(0) / d
    return _sgd(w, m, _rows(every, rows))


def _bf16_zero(w, m, g):  # the reduce-scatter in bfloat16
    mean = _scattered(g.astype(jnp.bfloat16)).astype(g.dtype) / jax.lax.axis_size("data")
    return _sgd(w, m, mean)


GRID_ZERO_WRONG = {
    "psum then slice": (_all_reduced, "all-reduce along 'data'"),
    "momentum gathered, whole update": (_state_gathered, "all-gather along 'data'|all-reduce"),
    "updated rows not gathered": (_not_gathered, r"only rows 0…3 of the parameter were updated"),
    "scattered over tensor": (lambda w, m, g: _sgd(w, m, _scattered(g, "tensor") / 2),
                              "shape|wrong values|tensor"),
    "d = 2 hard-coded": (lambda w, m, g: _sgd(w, m, _scattered(g) / 2),
                         r"right on the 2×4 mesh .* but on the 4×2 mesh.*divided by 2, but this "
                         "mesh has 4 data replicas"),
    "the sum, not the mean": (lambda w, m, g: _sgd(w, m, _scattered(g)),
                              "the sum of the 2 replicas' gradients: the step uses their mean"),
    "chapter 6's reduce-scatter": (
        lambda w, m, g: _sgd(w, m, mesh2d.run.reduce_scatter(g.T, "data").T / 2),
        r"write what `tpviz\.mesh2d\.run\.reduce_scatter`"),
    "chapter 5's adam": (
        lambda w, m, g: zero.run.adam(w, g, m, m, 1)[:2],
        r"write what `tpviz\.zero\.run\.adam`"),
    "gradient all-gathered": (_gradient_gathered, "all-gather along 'data' of"),
    "in bf16": (_bf16_zero, "wrong values|bytes"),
}


def test_grid_zero_book_solution_passes(capsys):
    passes(ex.check_grid_zero_step, zero_step, capsys=capsys)


def test_grid_zero_mean_first_passes(capsys):
    passes(ex.check_grid_zero_step, _zero_mean_first, capsys=capsys)


@pytest.mark.parametrize("name", sorted(GRID_ZERO_WRONG))
def test_grid_zero_wrong_program_fails(name):
    wrong, words = GRID_ZERO_WRONG[name]
    fails(ex.check_grid_zero_step, wrong, words=words)


def test_old_reduce_gradient_answers_the_old_check(capsys):
    """The contract: check_grid_reduce_scatter keeps its name, its call and its answer."""
    passes(ex.check_grid_reduce_scatter, reduce_gradient, capsys=capsys)


# --- review (rev11): more learners' programs for 11.6's step and 11.7's ZeRO step -------------
# Expected diagnoses are from the math: with L = ||y||² / 2B over the whole batch, each data
# replica's weight gradients add over 'data' (y / B with B = d·B/d); ZeRO's step is the mean of
# the d gradients, m ← β·m + ḡ, w ← w − lr·m, on the replica's H/d rows.

def _rv_hand(x, w1, w2, dy):  # dL/dW1, dL/dW2 from this device's shards and a given dL/dy
    z = x @ w1
    _, back = jax.vjp(jax.nn.gelu, z)
    (dz,) = back(dy @ w2.T)
    return x.T @ dz, jax.nn.gelu(z).T @ dy


def _rv_step(dy_of, sync):  # the forward, dL/dy = dy_of(x, partial, y), gradients through sync
    def step(x, w1, w2):
        partial = jax.nn.gelu(x @ w1) @ w2
        y = jax.lax.psum(partial, "tensor")
        dw1, dw2 = _rv_hand(x, w1, w2, dy_of(x, partial, y))
        return y, sync(dw1), sync(dw2)
    return step


def _rv_data(g):
    return jax.lax.psum(g, "data")


def _rv_whole_b(x, y):
    return y / (x.shape[0] * jax.lax.axis_size("data"))


def _rv_grad_of(loss_of, sync=lambda g: g):  # jax.grad of loss_of(x, w1, w2) -> (L, y)
    def step(x, w1, w2):
        (dw1, dw2), y = jax.grad(lambda a, b: loss_of(x, a, b), argnums=(0, 1),
                                 has_aux=True)(w1, w2)
        return y, sync(dw1), sync(dw2)
    return step


def _rv_psum_loss(x, w1, w2):  # right: the loss itself summed over data, then jax.grad
    y = jax.lax.psum(jax.nn.gelu(x @ w1) @ w2, "tensor")
    n = x.shape[0] * jax.lax.axis_size("data")
    return jax.lax.psum((y * y).sum(), "data") / (2 * n), y


def _rv_megatron_loss(x, w1, w2):  # the library's f/g layer, differentiated
    y = megatron.run.mlp(x, w1, w2, "tensor")
    return (y * y).sum() / (2 * x.shape[0] * jax.lax.axis_size("data")), y


def _rv_partial_loss(x, w1, w2):  # the loss of this device's partial y, not of the sum
    p = jax.nn.gelu(x @ w1) @ w2
    return (p * p).sum() / (2 * x.shape[0] * jax.lax.axis_size("data")), jax.lax.psum(p, "tensor")


def _rv_gather_sum(g):  # every replica's gradient gathered over data, then added
    return jax.lax.all_gather(g, "data").sum(0)


def _rv_scatter_gather(g):  # ZeRO's pair for the weight gradients: right sum, other kinds
    return jax.lax.all_gather(jax.lax.psum_scatter(g, "data", tiled=True), "data", tiled=True)


def _rv_dx_too(x, w1, w2):  # right values, plus f's backward: dL/dx all-reduced over tensor
    y, dw1, dw2 = _rv_step(lambda x, p, y: _rv_whole_b(x, y), _rv_data)(x, w1, w2)
    dy = _rv_whole_b(x, y)
    _, back = jax.vjp(jax.nn.gelu, x @ w1)
    dx = jax.lax.psum(back(dy @ w2.T)[0] @ w1.T, "tensor")
    return y + 0.0 * dx, dw1, dw2


def _rv_one_all_reduce(x, w1, w2):  # right: both gradients in one all-reduce over data
    y, dw1, dw2 = _rv_step(lambda x, p, y: _rv_whole_b(x, y), lambda g: g)(x, w1, w2)
    both = jax.lax.psum(jnp.concatenate([dw1, dw2.T]), "data")
    return y, both[:dw1.shape[0]], both[dw1.shape[0]:].T


RV_STEP_WRONG = {
    "jax.grad through megatron.mlp": (_rv_grad_of(_rv_megatron_loss),
                                      r"write what `tpviz\.megatron\.mlp`"),
    "jax.grad of the partial y's loss": (_rv_grad_of(_rv_partial_loss, _rv_data),
                                         "dW1 has the right shape but wrong values"),
    "dL/dy from the partial y": (_rv_step(lambda x, p, y: _rv_whole_b(x, p), _rv_data),
                                 "dW1 has the right shape but wrong values"),
    "gradients summed over 'tensor', not 'data'": (
        _rv_step(lambda x, p, y: _rv_whole_b(x, y), lambda g: jax.lax.psum(g, "tensor")),
        "replication|wrong values"),
    "d = 4 hard-coded": (_rv_step(lambda x, p, y: y / (4 * x.shape[0]), _rv_data),
                         "dW1 is 2 times too small: .*read d from the mesh"),
    "gradients all-gathered and added": (
        _rv_step(lambda x, p, y: _rv_whole_b(x, y), _rv_gather_sum),
        "right values, but .*all-gather along"),
    "gradients reduce-scattered and gathered": (
        _rv_step(lambda x, p, y: _rv_whole_b(x, y), _rv_scatter_gather),
        "right values, but .*reduce-scatter along"),
    "dL/dx all-reduced over tensor too": (_rv_dx_too,
                                          r"2 all-reduce\(s\) over 'tensor' of 256 bytes"),
}


@pytest.mark.parametrize("name", sorted(RV_STEP_WRONG))
def test_review_grid_step_wrong_program_fails(name):
    wrong, words = RV_STEP_WRONG[name]
    fails(ex.check_grid_mlp_step, wrong, words=words)


@pytest.mark.parametrize("right", [
    _rv_grad_of(_rv_psum_loss),  # jax.grad of a loss psum'd over data: the data sum by JAX
    _rv_step(lambda x, p, y: y / x.shape[0], lambda g: jax.lax.pmean(g, "data")),  # shard mean
    _rv_one_all_reduce], ids=["grad of psum'd loss", "shard mean, pmean", "one all-reduce"])
def test_review_grid_step_right_variant_passes(right, capsys):
    passes(ex.check_grid_mlp_step, right, capsys=capsys)


def _rv_rows(w, n, axis="data"):
    return jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index(axis) * n, n, axis=0)


def _rv_zero(mean_of, m_of=lambda m, mean: BETA * m + mean, by_new=True, axis="data"):
    """A ZeRO step: mean_of(g, rows) this replica's rows of ḡ, m_of the momentum's update,
    by_new whether w moves by the new momentum, axis the index that picks the rows."""
    def step(w, m, g):
        mean = mean_of(g, m.shape[0])
        new = m_of(m, mean)
        mine = _rv_rows(w, m.shape[0], axis) - LR * (new if by_new else m)
        return jax.lax.all_gather(mine, "data", axis=0, tiled=True), new
    return step


def _rv_scatter(g, rows):
    return jax.lax.psum_scatter(g, "data", scatter_dimension=0, tiled=True) / \
        jax.lax.axis_size("data")


def _rv_ring(g, rows):  # the reduce-scatter written as a ring of permutes
    d, r = jax.lax.axis_size("data"), jax.lax.axis_index("data")
    chunks = g.reshape(d, rows, -1)
    acc = jnp.take(chunks, (r - 1) % d, axis=0)
    for s in range(1, d):
        acc = jax.lax.ppermute(acc, "data", [(i, (i + 1) % d) for i in range(d)])
        acc = acc + jnp.take(chunks, (r - 1 - s) % d, axis=0)
    return acc / d


def _rv_untiled(g, rows):  # right: psum_scatter with tiled=False on a [d, H/d, F/t] view
    d = jax.lax.axis_size("data")
    return jax.lax.psum_scatter(g.reshape(d, rows, -1), "data", scatter_dimension=0) / d


def _rv_whole_update(w, m, g):  # right: the new momentum's rows gathered, w moved whole
    m = BETA * m + _rv_scatter(g, m.shape[0])
    return w - LR * jax.lax.all_gather(m, "data", axis=0, tiled=True), m


def _rv_stale_m(w, m, g):  # the momentum updated but the old one returned
    new = BETA * m + _rv_scatter(g, m.shape[0])
    mine = _rv_rows(w, m.shape[0]) - LR * new
    return jax.lax.all_gather(mine, "data", axis=0, tiled=True), m


RV_ZERO_WRONG = {
    "gradient not synchronised": (_rv_zero(lambda g, rows: _rv_rows(g, rows)),
                                  "moved by its own gradient only"),
    "gradient not synchronised, over d": (
        _rv_zero(lambda g, rows: _rv_rows(g, rows) / jax.lax.axis_size("data")),
        "moved by its own gradient over 2"),
    "momentum ignored": (_rv_zero(_rv_scatter, lambda m, mean: mean),
                         "moved by the mean gradient alone"),
    "moved by the old momentum": (_rv_zero(_rv_scatter, by_new=False),
                                  "moved by the momentum passed in"),
    "damped momentum": (_rv_zero(_rv_scatter, lambda m, mean: BETA * m + (1 - BETA) * mean),
                        r"the momentum added \(1 − β\)·ḡ"),
    "old momentum returned": (_rv_stale_m, "the momentum returned is the one passed in"),
    "rows picked by the tensor index": (_rv_zero(_rv_scatter, axis="tensor"),
                                        "wrong values"),
    "d = 4 hard-coded": (_rv_zero(lambda g, rows: _rv_scatter(g, rows) * jax.lax.axis_size(
        "data") / 4), "divided by 4, but this mesh has 2 data replicas"),
    "all-reduced over both axes": (
        _rv_zero(lambda g, rows: _rv_rows(jax.lax.pmean(g, ("data", "tensor")), rows)),
        "wrong values|all-reduce"),
    "scattered by columns": (
        _rv_zero(lambda g, rows: jax.lax.psum_scatter(g, "data", scatter_dimension=1,
                                                      tiled=True)), "shapes|shape"),
    "a ring of permutes": (_rv_zero(_rv_ring), "right values, but .*collective-permute"),
}


@pytest.mark.parametrize("name", sorted(RV_ZERO_WRONG))
def test_review_grid_zero_wrong_program_fails(name):
    wrong, words = RV_ZERO_WRONG[name]
    fails(ex.check_grid_zero_step, wrong, words=words)


@pytest.mark.parametrize("right", [_rv_zero(_rv_untiled), _rv_whole_update],
                         ids=["psum_scatter untiled", "w moved by the gathered momentum"])
def test_review_grid_zero_right_variant_passes(right, capsys):
    passes(ex.check_grid_zero_step, right, capsys=capsys)
