"""core.liveness: the bytes a traced program holds at once, counted by hand for small
programs (float32: 4 bytes a value)."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from tpviz.core import liveness
from tpviz.errors import CheckFailed

X = jax.ShapeDtypeStruct((10,), jnp.float32)  # 40 bytes


def peak(fn, *args):
    return liveness.peak_bytes(jax.make_jaxpr(fn)(*args))


def test_a_chain_holds_two_arrays_at_a_time():
    assert peak(lambda x: (x + 1) * 2 - 3, X) == 80  # an input and an output at each step


def test_a_value_read_at_the_end_stays_live():
    assert peak(lambda x: (x + 1) * 2 + x, X) == 120  # x, x + 1 and (x + 1) * 2


def test_a_jit_inside_counts_its_own_peak():
    inner = jax.jit(lambda x: (x + 1) * 2 + x)
    assert peak(lambda x: inner(x) - 1, X) == 120


@pytest.mark.parametrize("n", [2, 4, 8])
def test_a_carry_that_grows_with_n_shows(n):
    def keep(x):  # a loop whose carry holds n copies of x
        def step(i, kept):
            return kept.at[i].set(x * i)
        return jax.lax.fori_loop(0, n, step, jnp.zeros((n, 10)))

    def fold(x):  # a loop whose carry holds one
        return jax.lax.fori_loop(0, n, lambda i, acc: acc + x * i, jnp.zeros(10))

    assert peak(keep, X) >= 40 * n + 40  # the carry and x
    assert peak(fold, X) < 40 * 6  # the same few arrays, whatever n
    assert peak(keep, X) - peak(fold, X) >= 40 * (n - 1)


def test_shard_map_peak_counts_one_devices_shapes():
    from tpviz.core.harness_build import _mesh

    mesh = _mesh((4,), ("x",))
    fn = jax.shard_map(lambda a: (a + 1) * 2 + a, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                       check_vma=False)  # (with it, a constant becomes a 4-byte value)
    whole = jax.ShapeDtypeStruct((40,), jnp.float32)  # 10 values a device
    assert liveness.shard_map_peak(jax.make_jaxpr(fn)(whole)) == 120
    with pytest.raises(CheckFailed):
        liveness.shard_map_peak(jax.make_jaxpr(lambda a: a + 1)(whole))
