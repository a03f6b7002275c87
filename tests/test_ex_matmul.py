"""The matmul chapter's build checker for FSDP's case 2: the solution passes; an extra
collective, more bytes than the plan, the wrong axis, a raise and an endless loop fail."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz.core import exercises as framework

ex = tpviz.exercises


def _gather_w(x, w):
    return x @ tpviz.compat.all_gather_invariant(w, "X", axis=0, tiled=True)


def test_fsdp_matmul(capsys, monkeypatch):
    passes(ex.check_fsdp_matmul, _gather_w, capsys=capsys)

    def gather_both(x, w):  # right values; gathers In as well (an extra all-gather)
        x_all = jax.lax.all_gather(x, "X", axis=0, tiled=True)
        w_all = jax.lax.all_gather(w, "X", axis=0, tiled=True)
        i = jax.lax.axis_index("X")
        return jax.lax.dynamic_slice_in_dim(x_all @ w_all, i * x.shape[0], x.shape[0], 0)

    fails(ex.check_fsdp_matmul, gather_both, words="gathers In as well")

    def all_reduce_w(x, w):  # right values; an all-reduce of W1 (2x the ring bytes)
        i = jax.lax.axis_index("X")
        placed = jnp.zeros((32, w.shape[1]), w.dtype).at[i * 4 + jnp.arange(4)].set(w)
        return x @ jax.lax.psum(placed, "X")

    fails(ex.check_fsdp_matmul, all_reduce_w, words="all-reduce .* exactly one all-gather")
    fails(ex.check_fsdp_matmul, lambda x, w: x @ jax.lax.all_gather(w, "X", axis=1, tiled=True),
          words="raised")  # gathered along the wrong axis
    fails(ex.check_fsdp_matmul, lambda x, w: x[:, :4] @ w, words="wrong values")

    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def endless(x, w):
        while True:
            pass

    fails(ex.check_fsdp_matmul, endless, words="stopped")


@pytest.mark.parametrize("layouts", [("In[B_Y, D]", "W1[D_Y, F]"), ("In[B_X, D_Y]", "W1[D, F_Y]")])
def test_cases_e_and_f_are_case_2(layouts):
    assert tpviz.matmul.exercises._case(*layouts) == 2


def _sm(body, in_specs, out_specs):
    mesh8 = tpviz.make_mesh((8,), ("X",))
    return jax.shard_map(body, mesh=mesh8, in_specs=in_specs, out_specs=out_specs)


def _xw():
    import numpy as np

    rng = np.random.default_rng(2)
    return (rng.standard_normal((16, 32), dtype=np.float32),
            rng.standard_normal((32, 64), dtype=np.float32))


def test_column_parallel_third_wrong_implementation():
    x, w = _xw()
    # right values, then gathers the columns of Out back: an all-gather the layout never needed
    gathered_out = _sm(lambda a, b: tpviz.compat.all_gather_invariant(a @ b, "X", axis=1,
                                                                      tiled=True),
                       (P(), P(None, "X")), P())
    fails(ex.check_column_parallel, gathered_out, x, w, words="all-gather")


def test_reduce_scatter_third_wrong_implementation():
    x, w = _xw()
    rows = _sm(lambda a, b: jax.lax.psum_scatter(a @ b, "X", scatter_dimension=0, tiled=True),
               (P(None, "X"), P("X", None)), P("X", None))  # scattered along the wrong axis
    fails(ex.check_reduce_scatter, rows, x, w, words="laid out|shape|wrong values")
