"""Chapter 12's build checkers on the harness: the solver's Megatron choice written as shardings
(the old 12.4, kept for the contract; the new 12.4 is in test_wrong_programs_12.py), on 8 and 4
devices with the solver out of reach; and rows over (X, Y) resharded to rows over Y by hand in
shard_map (12.9), on three meshes. The book's solutions pass; wrong answers written as a learner
would fail with a message that names the mistake."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz import autoshard as auto
from tpviz import megatron

ex = tpviz.exercises

# --- the old 12.4: the shardings (kept for the contract) ------------------------------------------
MEGATRON = dict(x=P(), w1=P(None, "X"), h=P(None, "X"), w2=P("X", None), y=P())


def _library():  # the solver's own choice, read off its strategies
    s = auto.solve(auto.mlp(1024, 8192, 32768, layers=1), {"X": 8}, "H100 (NVLink)")
    c = s.choice
    return dict(x=c["w1.1"].in_specs[0], w1=c["w1.1"].weight_spec, h=c["gelu.1"].out_spec,
                w2=c["w2.1"].weight_spec, y=P())


SHARDINGS_WRONG = {
    "the solver": (_library, r"write what `tpviz\.autoshard\.solve\.solve`"),
    "megatron's specs": (lambda: {**megatron.specs("mlp"), "x": P(), "h": P(None, "X"),
                                  "y": P()}, r"write what `tpviz\.megatron\.plan\.specs`"),
    "data parallel": (lambda: dict(x=P("X", None), w1=P(), h=P("X", None), w2=P(), y=P()),
                      "whole W1"),
    "weights the other way round": (lambda: {**MEGATRON, "w1": P("X", None),
                                             "w2": P(None, "X")}, "right values, but"),
    "hidden gathered": (lambda: {**MEGATRON, "h": P()}, "all-gather"),
    "y split": (lambda: {**MEGATRON, "y": P(None, "X")}, "y comes out split"),
    "tokens split": (lambda: {**MEGATRON, "x": P("X", None)}, "all-gather"),
    "not a dict": (lambda: [P()] * 5, "dict"),
}


def test_megatron_shardings_solution_passes(capsys):
    ex.check_megatron_shardings(lambda: dict(MEGATRON))
    out = capsys.readouterr().out  # y [B, H] = [64, 256] float32: 65,536 bytes
    assert "✓" in out and "an all-reduce along 'X' of 65,536 bytes" in out
    assert "4 and 8 devices" in out


@pytest.mark.parametrize("name", sorted(SHARDINGS_WRONG))
def test_megatron_shardings_rejects_wrong_answers(name):
    wrong, words = SHARDINGS_WRONG[name]
    fails(ex.check_megatron_shardings, wrong, words=words)


# --- 12.9 rows over (X, Y) to rows over Y ------------------------------------------------------

def to_rows_over_y(a):  # the book's solution: reorder the blocks, then gather along X
    nx, ny = jax.lax.axis_size("X"), jax.lax.axis_size("Y")
    # device (x, y), linear index x·ny + y, holds block b = ny·x + y; rows over (Y, X) want
    # block b on device (b mod nx, b div nx)
    perm = [(b, (b % nx) * ny + b // nx) for b in range(nx * ny)]
    a = jax.lax.ppermute(a, ("X", "Y"), perm)
    return jax.lax.all_gather(a, "X", tiled=True)  # blocks nx·y … nx·y + nx - 1


def _gather_all(a):  # every block to every device, then the rows it keeps
    ny, y = jax.lax.axis_size("Y"), jax.lax.axis_index("Y")
    every = jax.lax.all_gather(a, ("X", "Y"), tiled=True)
    rows = every.shape[0] // ny
    return jax.lax.dynamic_slice_in_dim(every, y * rows, rows, axis=0)


def _in_halves(a):  # the block sent in two permutes of half its rows each
    nx, ny = jax.lax.axis_size("X"), jax.lax.axis_size("Y")
    perm = [(b, (b % nx) * ny + b // nx) for b in range(nx * ny)]
    half = a.shape[0] // 2
    moved = jnp.concatenate([jax.lax.ppermute(a[:half], ("X", "Y"), perm),
                             jax.lax.ppermute(a[half:], ("X", "Y"), perm)])
    return jax.lax.all_gather(moved, "X", tiled=True)


def _two_by_four(a):  # the permutation of the chapter's 2 × 4 mesh, written out
    perm = [(b, (b % 2) * 4 + b // 2) for b in range(8)]
    return jax.lax.all_gather(jax.lax.ppermute(a, ("X", "Y"), perm), "X", tiled=True)


def _wrong_axis(a):  # the same permute, then a gather along Y
    nx, ny = jax.lax.axis_size("X"), jax.lax.axis_size("Y")
    perm = [(b, (b % nx) * ny + b // nx) for b in range(nx * ny)]
    return jax.lax.all_gather(jax.lax.ppermute(a, ("X", "Y"), perm), "Y", tiled=True)


def _planned(a):  # asks the book's planner which collective it is, then runs only that
    auto.reshard((64, 16), P(("X", "Y"), None), P("Y", None), {"X": 2, "Y": 4})
    return jax.lax.all_gather(a, "X", tiled=True)


ROWS_WRONG = {
    "planner": (_planned, r"write what `tpviz\.autoshard\.strategies\.reshard`"),
    "gather everything": (_gather_all, "all-gather along .X.×.Y. of 4,096 bytes more than"),
    "in halves": (_in_halves, "collective-permute"),
    "written for 2 × 4": (_two_by_four, "right on the 2×4 mesh .* but on the 4×2 mesh"),
    "gather along Y": (_wrong_axis, "block of shape|wrong values"),
    "no permute": (lambda a: jax.lax.all_gather(a, "X", tiled=True), "wrong values"),
    "zeros": (lambda a: jnp.zeros((a.shape[0] * jax.lax.axis_size("X"), a.shape[1]), a.dtype),
              "wrong values"),
}


def test_rows_over_y_solution_passes(capsys):
    ex.check_rows_over_y(to_rows_over_y)
    out = capsys.readouterr().out  # a block [8, 16] float32 = 512 bytes; Y's rows [16, 16]: 1,024
    assert "✓" in out and "a collective-permute" in out and "of 512 bytes" in out
    assert "an all-gather along 'X' of 1,024 bytes" in out


@pytest.mark.parametrize("name", sorted(ROWS_WRONG))
def test_rows_over_y_rejects_wrong_programs(name):
    wrong, words = ROWS_WRONG[name]
    fails(ex.check_rows_over_y, wrong, words=words)
