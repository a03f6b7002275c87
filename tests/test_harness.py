"""The build-checker harness (tpviz.core.harness): the book's answers out of reach while the
learner's code runs, loops counted in the compiled program, and a toy exercise graded on its
values, sizes, placement and collectives."""

import contextlib
import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz.core import executed, harness
from tpviz.core.exercises import Wrong, checker
from tpviz.core.unavailable import Unavailable, unavailable
from tpviz.exercises import ExerciseFailed


def _answer(x):  # stands for a library function that solves an exercise
    return x + 1


def _factory():  # a library function that returns a program built from a nested function
    def inner(x):
        return x * 2

    return inner


NAMES = ("test_harness._answer", "test_harness._factory")


def test_calling_a_declared_function_fails_by_name_through_any_reference():
    alias, bound = _answer, functools.partial(_answer)
    built = _factory()  # built before the check: its nested code is watched too
    for fn in (lambda: _answer(1), lambda: alias(1), lambda: bound(1), lambda: built(1)):
        with pytest.raises(Unavailable, match=r"write what `test_harness\._"):  # noqa: SIM117
            with unavailable(NAMES):
                fn()
    assert sys.getprofile() is None  # removed on the way out
    with unavailable(NAMES) as called, contextlib.suppress(BaseException):
        _answer(1)  # the learner's code swallows the exception: the call is still recorded
    assert called == ["test_harness._answer"]
    assert _answer(1) == 2 and built(3) == 6  # usable again outside


def test_custom_vjp_and_jit_are_watched_through_their_python_functions():
    @jax.custom_vjp
    def f(x):
        return x

    f.defvjp(lambda x: (x, None), lambda _, g: (g,))
    f_jit = jax.jit(lambda x: x * 3)
    sys.modules[__name__].f_custom, sys.modules[__name__].f_jit = f, f_jit
    for fn in (lambda: f(1.0), lambda: jax.grad(lambda x: f(x) * 2)(1.0), lambda: f_jit(2.0)):
        with pytest.raises(Unavailable):  # noqa: SIM117
            with unavailable(("test_harness.f_custom", "test_harness.f_jit")):
                fn()


def test_a_fori_loop_runs_its_permute_once_per_step():
    mesh = tpviz.make_mesh((8,), ("X",))
    pairs = [(i, (i + 1) % 8) for i in range(8)]

    def looped(x):
        return jax.lax.fori_loop(0, 7, lambda i, v: jax.lax.ppermute(v, "X", pairs), x)

    program = jax.jit(jax.shard_map(looped, mesh=mesh, in_specs=P("X"), out_specs=P("X")))
    x = np.arange(16, dtype=np.float32)
    assert len(tpviz.core.compiled.collectives(program, x)) == 1  # in the text once
    ran = executed.executed(program.lower(x).compile())
    assert [c.kind for c in ran] == ["collective-permute"] * 7

    def data_dependent(x):
        return jax.lax.while_loop(lambda v: v.sum() < 100, lambda v: jax.lax.ppermute(
            v, "X", pairs) + 1, x)

    unknown = jax.jit(jax.shard_map(data_dependent, mesh=mesh, in_specs=P("X"),
                                    out_specs=P("X")))
    with pytest.raises(executed.UnknownCount, match="not known"):
        executed.executed(unknown.lower(x).compile())


TOY = harness.Build(
    what="your function", layouts=("x[I_X]",), out="s[I]", axes=("X",),
    cases=(((8,), {"n": 16}), ((8,), {"n": 40}), ((4,), {"n": 16})),
    inputs=lambda s, rng: (rng.standard_normal(s["n"], dtype=np.float32),),
    reference=lambda x: np.full(x.shape[0] // 8 * 0 + 1, x.sum(), np.float32),
    collectives=lambda case: [harness.Expect("all-reduce", 4, ("X",), what="one number")],
    unavailable=("test_harness._answer",), hint="Sum locally first.")


@checker("Toy")
def check_toy(fn):
    return harness.grade(fn, TOY)


def _fails(fn, words):
    with pytest.raises(ExerciseFailed, match=words):
        check_toy(fn)


def test_a_toy_build_is_graded_on_values_sizes_collectives_and_the_library(capsys):
    check_toy(lambda b: jax.lax.psum(b.sum(), "X")[None])
    out = capsys.readouterr().out
    assert "✓" in out and "an all-reduce along 'X' of 4 bytes" in out and "4 and 8" in out
    _fails(lambda b: jax.lax.psum(b, "X").sum()[None], "moves 8 bytes, more than one number")
    _fails(lambda b: jax.lax.psum(b.sum(), "X")[None] * 2, "wrong values")
    _fails(lambda b: (jax.lax.psum(b.sum(), "X") + 0 * _answer(b.sum()))[None],
           "write what `test_harness._answer` does")
    # right with 8 devices only: the sum of 8 equal shares written as 8 times one share
    _fails(lambda b: jax.lax.psum(b.sum(), "X")[None] * (8 / jax.lax.psum(1, "X")) ** 0 *
           jnp.where(b.shape[0] == 2, 1.0, 0.5), "right on 8 devices with n = 16, but on")
    _fails(lambda b: jax.lax.all_gather(b.sum(), "X").sum()[None],
           "all-gather .* a kind of collective this exercise does not need")
    assert check_toy(...) is None  # a stub: not attempted


def test_guarded_names_the_function_even_when_the_error_is_swallowed():
    def sneaky():
        try:
            return _answer(1)
        except BaseException:
            return 2

    with pytest.raises(Wrong, match=r"test_harness\._answer"):
        harness.guarded(sneaky, names=("test_harness._answer",))
