"""Chapter 0's build checkers on the harness: the book's solutions pass; wrong programs written
as a learner would (a shortcut, a hard-coded or one-size answer, an operand held whole, a wrong
or extra collective) fail with a message that names the mistake."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from checking import fails, passes
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz.core import exercises as framework

ex = tpviz.exercises
ROWS = P(("X", "Y"), None)
BLOCKS, SPLIT = P("X", "Y"), P("X")


# --- 0.4 a global sum with one all-reduce ---------------------------------------------------

def _total(body, in_specs=SPLIT):
    mesh8 = tpviz.make_mesh((8,), ("X",))
    return jax.shard_map(body, mesh=mesh8, in_specs=in_specs, out_specs=P())


X8 = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)


def test_total_the_solution_passes_and_reports_the_compiled_all_reduce(capsys):
    passes(ex.check_total, _total(lambda b: jax.lax.psum(b.sum(), "X")), X8, capsys=capsys)
    ex.check_total(_total(lambda b: jax.lax.psum(b.sum(), "X")), X8)
    assert "moved an all-reduce along 'X' of 4 bytes" in capsys.readouterr().out


@pytest.mark.parametrize(("wrong", "words"), [
    # the hard-coded answer: the sum of the notebook's x, whatever the input
    (_total(lambda b: jax.lax.psum(b.sum() * 0, "X") + 8128.0), "wrong values"),
    # a shortcut: the compiler sums it (no shard_map, no collective of the learner's)
    (jax.jit(lambda a: a.sum()), "has no jax.shard_map"),
    # x held whole on every device, summed locally
    (_total(lambda b: b.sum(), in_specs=P()), "x is held whole on each device"),
    # the whole block all-reduced, then summed: one row's bytes instead of one number
    (_total(lambda b: jax.lax.psum(b, "X").sum()), "more than one number's 4 bytes"),
    # right for the notebook's x only, with one row per device
    (_total(lambda b: jax.lax.psum(b[0].sum(), "X")), "wrong values"),
    # the mean instead of the sum
    (_total(lambda b: jax.lax.pmean(b.sum(), "X")), "wrong values"),
])
def test_total_rejects_wrong_programs(wrong, words):
    fails(ex.check_total, wrong, X8, words=words)


def test_total_rejects_a_shard_map_that_leaves_the_sum_to_the_compiler():
    """Review (issue 39): a shard_map that only sums locally, the global sum left to the compiler
    outside it (it inserts the all-reduce), passed; so did a right program wrapped in reshards."""
    mesh8 = tpviz.make_mesh((8,), ("X",))
    local = jax.shard_map(lambda b: b.sum(keepdims=True).reshape(1), mesh=mesh8, in_specs=SPLIT,
                          out_specs=SPLIT)
    fails(ex.check_total, jax.jit(lambda a: jnp.sum(local(a))), X8,
          words="computes outside its jax.shard_map .reduce_sum.")
    right = _total(lambda b: jax.lax.psum(b.sum(), "X"))
    fails(ex.check_total, jax.jit(lambda a: right(jax.lax.with_sharding_constraint(
        a, NamedSharding(mesh8, P())))), X8, words="computes outside its jax.shard_map")


def test_total_passes_other_right_programs(capsys):
    """Review: the mean times the axis size, and check_vma=False, are right too."""
    passes(ex.check_total, _total(lambda b: jax.lax.pmean(b.sum(), "X") *
                                  jax.lax.axis_size("X")), X8, capsys=capsys)
    mesh8 = tpviz.make_mesh((8,), ("X",))
    passes(ex.check_total, jax.jit(jax.shard_map(
        lambda b: jax.lax.psum(jnp.sum(b.sum(1)), "X"), mesh=mesh8, in_specs=SPLIT,
        out_specs=P(), check_vma=False)), X8, capsys=capsys)


# --- 0.5 reshard by hand, in Manual mode inside Explicit mode -----------------------------------

def _to_rows(move, in_specs=BLOCKS, out_specs=ROWS):
    return lambda a: jax.shard_map(move, in_specs=in_specs, out_specs=out_specs)(a)


def _right(block):  # the book's solution
    return jax.lax.all_to_all(block, "Y", 0, 1, tiled=True)


def test_explicit_reshard_solution_passes_on_both_meshes(capsys):
    ex.check_explicit_reshard(_to_rows(_right))
    out = capsys.readouterr().out
    assert "✓" in out and "all-to-all along 'Y' of 256 bytes" in out and "2×4 and 4×2" in out


def _gathered(block):  # every column of Y gathered, then its own rows kept
    whole = jax.lax.all_gather(block, "Y", axis=1, tiled=True)
    rows = block.shape[0] // jax.lax.axis_size("Y")
    return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index("Y") * rows, rows, 0)


def _four_pieces(block):  # written for the (2, 4) mesh: 4 pieces, whatever Y's size
    pieces = jax.lax.all_to_all(block.reshape(4, -1, block.shape[1]), "Y", 0, 0)
    return jnp.concatenate(list(pieces), axis=1)


@pytest.mark.parametrize(("wrong", "words"), [
    # the one-call shortcut: the compiler moves the data, not the learner's program
    (lambda a: jax.sharding.reshard(a, ROWS), "has no jax.shard_map"),
    # Y major: the right blocks on the wrong devices
    (_to_rows(_right, out_specs=P(("Y", "X"), None)), "wrong values"),
    # an operand gathered whole along Y: right values, an all-gather instead of an all-to-all
    (_to_rows(_gathered), "all-gather along 'Y' .* not need"),
    # right on the (2, 4) mesh only
    (_to_rows(_four_pieces), "right on the 2×4 mesh .* but on the 4×2 mesh"),
    # split along the columns: the pieces land in the wrong places
    (_to_rows(lambda b: jax.lax.all_to_all(b, "Y", 1, 0, tiled=True)), "shape|wrong values"),
])
def test_explicit_reshard_rejects_wrong_programs(wrong, words):
    fails(ex.check_explicit_reshard, wrong, words=words)


def test_explicit_reshard_rejects_reshard_around_a_shard_map():
    """Review: jax.sharding.reshard before or after a shard_map that moves nothing passed (the
    compiler did the all-to-all); so must a right program with an extra reshard."""
    def before(a):
        return _to_rows(lambda b: b, in_specs=ROWS)(jax.sharding.reshard(a, ROWS))

    def after(a):
        return jax.sharding.reshard(_to_rows(lambda b: b * 1, out_specs=BLOCKS)(a), ROWS)

    for wrong in (before, after):
        fails(ex.check_explicit_reshard, wrong, words="computes outside its jax.shard_map "
              r"\(reshard\)")


def test_explicit_reshard_passes_other_right_programs(capsys):
    """Review: untiled all_to_all with reshapes under check_vma=False, and the abstract mesh
    named explicitly, are right."""
    def untiled(block):
        ny = jax.lax.axis_size("Y")
        got = jax.lax.all_to_all(block.reshape(ny, -1, block.shape[1]), "Y", 0, 0)
        return jnp.concatenate([got[j] for j in range(ny)], axis=1)

    passes(ex.check_explicit_reshard, lambda a: jax.shard_map(
        untiled, in_specs=BLOCKS, out_specs=ROWS, check_vma=False)(a), capsys=capsys)
    passes(ex.check_explicit_reshard, lambda a: jax.shard_map(
        _right, mesh=jax.sharding.get_abstract_mesh(), in_specs=BLOCKS, out_specs=ROWS)(a),
        capsys=capsys)


def test_explicit_reshard_stops_an_endless_loop(monkeypatch):
    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def endless(a):
        while True:
            pass

    fails(ex.check_explicit_reshard, endless, words="stopped")


# --- 0.3 rows over the whole mesh (one-line) ------------------------------------------------

def test_rows_over_mesh_reads_the_compiled_memory(capsys):
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))
    y = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    passes(ex.check_rows_over_mesh, jax.device_put(y, NamedSharding(mesh, ROWS)), y,
           capsys=capsys)


def test_rows_over_mesh_wants_the_chapters_mesh():
    y = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    line = tpviz.make_mesh((8,), ("X",))  # the same blocks on a 1-D mesh
    fails(ex.check_rows_over_mesh, jax.device_put(y, NamedSharding(line, P("X"))), y,
          words="the .2, 4. mesh with axes X")
    other = tpviz.make_mesh((2, 4), ("A", "B"))  # other axis names
    fails(ex.check_rows_over_mesh, jax.device_put(y, NamedSharding(other, P(("A", "B")))), y,
          words="the .2, 4. mesh with axes X")
