"""Chapter 0's upgraded builds (issue 39's mutation pass): for 0.4 (a global mean and variance
with one all-reduce), the book's solution and a plausible variant pass, and wrong programs
written as a learner would (a gather then jnp.var, two all-reduces, a hard-coded count, a mean
of per-device variances, right on 8 devices only, jnp.var of the block alone) fail with words
that name the mistake; for 0.5 (A[I_X, J_Y] to A[I, J_XY] in two all-to-alls), likewise (the
reshard shortcut, everything gathered, one all-to-all only, an extra all-gather, Y's size fixed,
the wrong major axis, the array taken whole)."""

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


def _my_columns(whole):  # A taken whole into the shard_map, then my columns sliced
    n = whole.shape[1] // (jax.lax.axis_size("X") * jax.lax.axis_size("Y"))
    me = jax.lax.axis_index("X") * jax.lax.axis_size("Y") + jax.lax.axis_index("Y")
    return jax.lax.dynamic_slice_in_dim(whole, me * n, n, 1)


def test_columns_rejects_the_array_taken_whole():
    """Explicit mode refuses in_specs=P() for an A typed A[I_X, J_Y]; made whole first, the
    compiler's gather runs outside the learner's shard_map."""
    def wrong(a):
        whole = jax.sharding.reshard(a, P())
        return jax.shard_map(_my_columns, in_specs=P(), out_specs=COLS)(whole)

    fails(ex.check_reshard_columns, wrong, words=r"computes outside its jax.shard_map \(reshard\)")


def test_stubs_are_not_attempted(capsys):
    def stub(_):
        raise NotImplementedError("exercise not attempted yet")

    for check in (ex.check_global_moments, ex.check_reshard_columns):
        check(stub)
        assert "not attempted" in capsys.readouterr().out


# --- review (rev00): more programs a learner would write ---------------------------------------

def _stack_psum(block):  # the two sums, all-reduced together
    return jax.lax.psum(jnp.stack([block.sum(), (block * block).sum()]), "X")


def _moments_from(n, var):
    def stats(block):
        total, squares = _stack_psum(block)
        count = n(block)
        return total / count, var(total / count, squares / count, count)
    return stats


def _two_passes(block):  # exact, but the mean must arrive before the second all-reduce
    n = block.size * jax.lax.axis_size("X")
    mean = jax.lax.psum(block.sum(), "X") / n
    return mean, jax.lax.psum(((block - mean) ** 2).sum(), "X") / n


def _tuple_psum(block):  # one psum call on a tuple: JAX binds one psum per element
    n = block.size * jax.lax.axis_size("X")
    total, squares = jax.lax.psum((block.sum(), (block * block).sum()), "X")
    return total / n, squares / n - (total / n) ** 2


def _count_sent(block):  # the count all-reduced too: 12 bytes
    c, s, q = jax.lax.psum(jnp.stack([jnp.float32(block.size), block.sum(),
                                      (block * block).sum()]), "X")
    return s / c, q / c - (s / c) ** 2


def _pairs_gathered(block):  # every device's two numbers gathered, then added
    n = block.size * jax.lax.axis_size("X")
    s, q = jax.lax.all_gather(jnp.stack([block.sum(), (block * block).sum()]), "X").sum(0)
    return s / n, q / n - (s / n) ** 2


def _helper_gathered(block):  # tpviz's own gather, then jnp.var under jit
    whole = tpviz.compat.all_gather_invariant(block, "X", tiled=True)
    return jax.jit(jnp.mean)(whole), jax.jit(jnp.var)(whole)


def _block_summed(block):  # psum of the whole block: the elementwise sum of the blocks
    total = jax.lax.psum(block, "X")
    return total.mean() / jax.lax.axis_size("X"), jnp.var(total)


_N = lambda b: b.size * jax.lax.axis_size("X")  # noqa: E731


@pytest.mark.parametrize(("wrong", "words"), [
    (_moments_from(lambda b: 128, lambda m, m2, n: m2 - m * m), "the mean .* wrong values"),
    (_moments_from(_N, lambda m, m2, n: (m2 - m * m) * n / (n - 1)),
     "the variance has the right shape but wrong values"),  # the sample variance (ddof=1)
    (_moments_from(_N, lambda m, m2, n: m2 - m), "the variance .* wrong values"),
    (_two_passes, "2 all-reduces along 'X' of 4 bytes each: the exercise needs one all-reduce"),
    (_tuple_psum, "calls 2 collectives .* a psum of a tuple or list is one per element"),
    (_count_sent, "moves 12 bytes, more than the 8 needed"),
    (_pairs_gathered, "all-gather along 'X' of 64 bytes, a kind of collective"),
    (_helper_gathered, "all-gather along 'X' of 320 bytes"),
    (_block_summed, "the variance .* wrong values"),
])
def test_moments_rejects_more_wrong_programs(wrong, words):
    msg = fails(ex.check_global_moments, wrong, words=words)
    assert "psum(" not in msg and "jnp.stack" not in msg  # says what is wrong, not the code


def _chan(block):  # right: per-block mean and M2 (Welford/Chan), combined in one all-reduce
    n, m = block.size, block.mean()
    s, q = jax.lax.psum(jnp.stack([n * m, ((block - m) ** 2).sum() + n * m * m]), "X")
    mean = s / _N(block)
    return mean, q / _N(block) - mean * mean


def _counted_by_psum(block):  # right: psum of a Python int is the axis size, not a collective
    s, q = _stack_psum(block)
    n = jax.lax.psum(block.size, "X")
    return s / n, jnp.maximum(q / n - (s / n) ** 2, 0.0)


def test_moments_right_variants_pass(capsys):
    passes(ex.check_global_moments, _chan, capsys=capsys)
    passes(ex.check_global_moments, _counted_by_psum, capsys=capsys)


def _first_rows(block):  # step 1 of the book's route: A[I_X, J_Y] -> A[I_XY, J]
    return jax.lax.all_to_all(block, "Y", 0, 1, tiled=True)


def _second_yx(block):  # the second all-to-all over (Y, X): rows arrive out of order
    return jax.lax.all_to_all(_first_rows(block), ("Y", "X"), 1, 0, tiled=True)


def _x_then_permute(block):  # right values in an all-to-all and a collective-permute
    nx, ny = jax.lax.axis_size("X"), jax.lax.axis_size("Y")
    cols = jax.lax.all_to_all(block, "X", 1, 0, tiled=True)  # A[I, J_YX]
    return jax.lax.ppermute(cols, ("X", "Y"), [(x * ny + y, y * nx + x)
                                               for x in range(nx) for y in range(ny)])


def _split_swapped(block):  # step 1 with split and concat axes swapped
    return jax.lax.all_to_all(jax.lax.all_to_all(block, "Y", 1, 0, tiled=True), ("X", "Y"),
                              1, 0, tiled=True)


def _helper_gathers(block):  # tpviz's all_gather_invariant twice, then my columns
    g = tpviz.compat.all_gather_invariant(block, "Y", axis=1, tiled=True)
    g = tpviz.compat.all_gather_invariant(g, "X", axis=0, tiled=True)
    n = g.shape[1] // (jax.lax.axis_size("X") * jax.lax.axis_size("Y"))
    me = jax.lax.axis_index("X") * jax.lax.axis_size("Y") + jax.lax.axis_index("Y")
    return jax.lax.dynamic_slice_in_dim(g, me * n, n, 1)


def _literal_sizes(block):  # written for 16x32 on the 2x4 mesh
    rows = jnp.concatenate(list(jax.lax.all_to_all(block.reshape(4, 2, 8), "Y", 0, 0)), 1)
    return jax.lax.all_to_all(rows, ("X", "Y"), 1, 0, tiled=True)


def _placed_and_summed(block):  # my block in a zero array, all-reduced, my columns kept
    nx, ny = jax.lax.axis_size("X"), jax.lax.axis_size("Y")
    r, c = block.shape
    z = jax.lax.dynamic_update_slice(jnp.zeros((r * nx, c * ny), block.dtype), block,
                                     (jax.lax.axis_index("X") * r, jax.lax.axis_index("Y") * c))
    n = c // nx
    me = jax.lax.axis_index("X") * ny + jax.lax.axis_index("Y")
    return jax.lax.dynamic_slice_in_dim(jax.lax.psum(z, ("X", "Y")), me * n, n, 1)


def _current():
    return jax.sharding.get_abstract_mesh()


@pytest.mark.parametrize(("wrong", "words"), [
    (lambda a: jax.device_put(a, jax.sharding.NamedSharding(_current(), COLS)),
     "has no jax.shard_map"),
    (lambda a: jax.lax.with_sharding_constraint(a, jax.sharding.NamedSharding(_current(), COLS)),
     "raised AssertionError"),
    (lambda a: jax.sharding.reshard(jax.shard_map(_first_rows, in_specs=BLOCKS,
                                                  out_specs=P(("X", "Y")))(a), COLS),
     r"computes outside its jax.shard_map \(reshard\)"),
    (_cols(_second_yx), "wrong values"),
    (_cols(_x_then_permute), "collective-permute along 'X'×'Y' of 256 bytes, a kind"),
    (_cols(_split_swapped), "split_axis"),
    (_cols(_helper_gathers), "all-gather along 'Y' of 1,024 bytes"),
    (lambda a: jax.shard_map(_literal_sizes, in_specs=BLOCKS, out_specs=COLS,
                             check_vma=False)(a),
     "right on the 2×4 mesh with rows = 16, cols = 32, but on the 2×4 mesh with rows = 8"),
    (_cols(_placed_and_summed), "all-reduce along 'X'×'Y' of 2,048 bytes"),
])
def test_columns_rejects_more_wrong_programs(wrong, words):
    fails(ex.check_reshard_columns, wrong, words=words)


def test_columns_names_the_y_major_order():
    """One all-to-all along X, or the right moves under Y-major out_specs: every column is
    there, in the order of A[I, J_YX]; the message says so."""
    for wrong in (_cols(_y_major), _cols(_right, out_specs=P(None, ("Y", "X")))):
        fails(ex.check_reshard_columns, wrong, words=r"Y-major order \(A\[I, J_YX\]\)")


def test_columns_right_variants_pass(capsys):
    def untiled(block):  # both steps with reshapes, and the mesh named
        ny, n = jax.lax.axis_size("Y"), jax.lax.axis_size(("X", "Y"))
        rows = jax.lax.all_to_all(block.reshape(ny, -1, block.shape[1]), "Y", 0, 0)
        rows = jnp.concatenate([rows[j] for j in range(ny)], axis=1)
        got = jax.lax.all_to_all(rows.reshape(rows.shape[0], n, -1).transpose(1, 0, 2),
                                 ("X", "Y"), 0, 0)
        return jnp.concatenate([got[j] for j in range(n)], axis=0)

    passes(ex.check_reshard_columns, lambda a: jax.shard_map(
        untiled, mesh=_current(), in_specs=BLOCKS, out_specs=COLS, check_vma=False)(a),
        capsys=capsys)
