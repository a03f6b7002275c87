"""Chapter 0's upgraded builds (issue 39's mutation pass): for 0.4 (a global mean and variance
with one all-reduce), the book's solution and a plausible variant pass, and wrong programs
written as a learner would (a gather then jnp.var, two all-reduces, a hard-coded count, a mean
of per-device variances, right on 8 devices only, jnp.var of the block alone) fail with words
that name the mistake."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes
from jax.sharding import PartitionSpec as P

import tpviz

ex = tpviz.exercises


# --- 0.4 a global mean and variance with one all-reduce ---------------------------------------

def block_stats(block):  # the book's solution
    count = block.size * jax.lax.axis_size("X")
    total, squares = jax.lax.psum(jnp.stack([block.sum(), (block * block).sum()]), "X")
    mean = total / count
    return mean, squares / count - mean * mean


def _means_averaged(block):  # right: every block has the same size, so pmean of block means
    m, m2 = jax.lax.pmean(jnp.stack([block.mean(), (block**2).mean()]), "X")
    return m, m2 - m**2


def test_moments_solution_and_a_variant_pass(capsys):
    ex.check_global_moments(block_stats)
    out = capsys.readouterr().out
    assert "✓" in out and "all-reduce along 'X' of 8 bytes" in out and "4 and 8 devices" in out
    passes(ex.check_global_moments, _means_averaged, capsys=capsys)


def _gathered(block):  # every block gathered, then the library's var
    whole = jax.lax.all_gather(block, "X", tiled=True)
    return jnp.mean(whole), jnp.var(whole)


def _two_psums(block):  # one all-reduce for the sum, another for the squares
    n = block.size * jax.lax.axis_size("X")
    mean = jax.lax.psum(block.sum(), "X") / n
    return mean, jax.lax.psum((block * block).sum(), "X") / n - mean * mean


def _counted(n):  # the count written out for one size
    def stats(block):
        total, squares = jax.lax.psum(jnp.stack([block.sum(), (block * block).sum()]), "X")
        count = n(block)
        return total / count, squares / count - (total / count) ** 2
    return stats


def _variances_averaged(block):  # each device's own variance, averaged
    return jax.lax.pmean(block.mean(), "X"), jax.lax.pmean(block.var(), "X")


def _block_only(block):  # jnp.var where the block is all a device has
    return jnp.mean(block), jnp.var(block)


@pytest.mark.parametrize(("wrong", "words"), [
    (_gathered, "all-gather along 'X' .* does not need"),
    (_two_psums, "calls 2 collectives"),
    (_counted(lambda b: 80), r"right on 8 devices with rows = 16, cols = 5, but .* wrong values"),
    (_variances_averaged, "the variance has the right shape but wrong values"),
    (_counted(lambda b: b.size * 8), "right on 8 devices .* but on 4 devices .* wrong values"),
    (_block_only, "the mean has the right shape but wrong values"),
])
def test_moments_rejects_wrong_programs(wrong, words):
    fails(ex.check_global_moments, wrong, words=words)


def test_moments_rejects_the_old_global_sum():
    """0.4's old answer (one number) is not a (mean, var) pair."""
    fails(ex.check_global_moments, lambda b: jax.lax.psum(b.sum(), "X"),
          words="raised ValueError: pytree structure")


# --- 0.5 reshard to columns by hand -----------------------------------------------------------

COLS, BLOCKS = P(None, ("X", "Y")), P("X", "Y")


def _cols(move, out_specs=COLS):
    return lambda a: jax.shard_map(move, in_specs=BLOCKS, out_specs=out_specs)(a)


def _right(block):  # the book's solution
    rows = jax.lax.all_to_all(block, "Y", 0, 1, tiled=True)
    return jax.lax.all_to_all(rows, ("X", "Y"), 1, 0, tiled=True)


def _gathered(block):  # everything gathered, then my columns kept
    whole = jax.lax.all_gather(jax.lax.all_gather(block, "Y", axis=1, tiled=True), "X",
                               axis=0, tiled=True)
    n = whole.shape[1] // (jax.lax.axis_size("X") * jax.lax.axis_size("Y"))
    me = jax.lax.axis_index("X") * jax.lax.axis_size("Y") + jax.lax.axis_index("Y")
    return jax.lax.dynamic_slice_in_dim(whole, me * n, n, 1)


def _y_major(block):  # one all-to-all along X: the columns land Y major
    return jax.lax.all_to_all(block, "X", 1, 0, tiled=True)


def _extra(block):  # right, then an all-gather and a slice that changes nothing
    out = _right(block)
    both = jax.lax.all_gather(out, "X", axis=0, tiled=True)
    r = out.shape[0]
    return jax.lax.dynamic_slice_in_dim(both, jax.lax.axis_index("X") * r, r, 0)


def _four(block):  # written for the (2, 4) mesh: Y's size fixed at 4
    rows = jax.lax.all_to_all(block.reshape(4, -1, block.shape[1]), "Y", 0, 0)
    rows = jnp.concatenate(list(rows), axis=1)
    return jax.lax.all_to_all(rows, ("X", "Y"), 1, 0, tiled=True)


@pytest.mark.parametrize(("wrong", "words"), [
    (lambda a: jax.sharding.reshard(a, COLS), "has no jax.shard_map"),
    (_cols(_gathered), "all-gather"),
    (_cols(_y_major), r"Y-major order \(A\[I, J_YX\]\)"),
    (_cols(_extra), "all-gather"),
    (_cols(_four), "right on the 2×4 mesh .* but on the 4×2 mesh"),
    (_cols(_right, out_specs=P(None, ("Y", "X"))), "Y-major order"),
])
def test_columns_rejects_wrong_programs(wrong, words):
    fails(ex.check_reshard_columns, wrong, words=words)


def test_columns_solution_and_a_variant_pass(capsys):
    ex.check_reshard_columns(_cols(_right))
    out = capsys.readouterr().out
    assert "✓" in out and "all-to-all along 'X'×'Y' of 256 bytes" in out and "4×2" in out

    def untiled(block):  # the first step with reshapes, under check_vma=False
        ny = jax.lax.axis_size("Y")
        got = jax.lax.all_to_all(block.reshape(ny, -1, block.shape[1]), "Y", 0, 0)
        rows = jnp.concatenate([got[j] for j in range(ny)], axis=1)
        return jax.lax.all_to_all(rows, ("X", "Y"), 1, 0, tiled=True)

    passes(ex.check_reshard_columns, lambda a: jax.shard_map(
        untiled, in_specs=BLOCKS, out_specs=COLS, check_vma=False)(a), capsys=capsys)

