"""The probe of issue 32, replayed: NaN and infinities never pass, learner code cannot escape
the checker's time limit (a second trace, ``sys.exit``, an itimer reset, compiled endless loops,
an ``__eq__`` that never returns), dict answers take only their documented keys, NumPy and
``Fraction`` answers are accepted, and every size guard answers at once with a clear error."""

from __future__ import annotations

import math
import signal
import sys
import time
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tpviz
from tpviz import collectives, exercises, matmul, megatron, mesh2d, moe
from tpviz.core import exercises as framework
from tpviz.core import verify
from tpviz.errors import CheckFailed
from tpviz.exercises import ExerciseFailed

NAN, INF = math.nan, math.inf


# --- NaN and infinities -------------------------------------------------------------------

@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_close_refuses_a_non_finite_result(bad):
    got = np.ones(3)
    got[1] = bad
    with pytest.raises(CheckFailed, match="y is not finite: 1 of 3 values"):
        verify.close(got, np.ones(3), "y")
    with pytest.raises(CheckFailed, match="not finite"):
        verify.close(np.full(3, bad), np.ones(3), "y")  # max(0.0, nan) was 0.0
    assert verify.relative_error(got, np.ones(3)) == math.inf


def test_close_refuses_a_non_finite_reference_and_pytrees():
    with pytest.raises(CheckFailed, match="the reference for y is not finite"):
        verify.close(np.ones(3), np.full(3, NAN), "y")
    with pytest.raises(CheckFailed, match="not finite"):
        verify.close({"a": np.ones(2), "b": np.array([1.0, NAN])},
                     {"a": np.ones(2), "b": np.ones(2)}, "grads")
    assert verify.close(np.ones(3), np.ones(3), "y") == 0.0


def _nan_like(x):
    x = np.array(x, np.float32)
    x.flat[0] = NAN
    return x


def test_matmul_check_fails_on_nan():
    mesh = tpviz.make_mesh((4, 2), ("X", "Y"))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 32), np.float32), rng.standard_normal((32, 64), np.float32)
    p = matmul.plan(x.shape, w.shape, "In[B_X, D_Y]", "W1[D_Y, F]", {"X": 4, "Y": 2})
    with pytest.raises(CheckFailed, match="not finite"):
        matmul.check(p, mesh, _nan_like(x), w)


def test_megatron_check_fails_on_nan():
    mesh = tpviz.make_mesh((4,), ("model",), devices=tpviz.devices.chosen_devices()[:4])
    params = megatron.init(16, 32, kind="mlp")
    x = np.ones((2, 4, 16), np.float32)
    with pytest.raises(CheckFailed, match="not finite"):
        megatron.check("mlp", mesh, _nan_like(x), x, params)


def test_mesh2d_check_fails_on_inf():
    rng = np.random.default_rng(0)
    x, dy = (rng.standard_normal((16, 8), dtype=np.float32) for _ in range(2))
    w1, w2 = rng.standard_normal((8, 16), np.float32), rng.standard_normal((16, 8), np.float32)
    x[0, 0] = INF
    with pytest.raises(CheckFailed, match="not finite"):
        mesh2d.check(tpviz.make_mesh((4, 2), ("data", "model")), x, w1, w2, dy)


def test_data_parallel_check_fails_on_nan():
    mesh = tpviz.make_mesh((8,), ("X",))
    from tpviz.collectives.run import init_mlp

    x, y = np.ones((32, 8), np.float32), np.ones((32, 4), np.float32)
    with pytest.raises(CheckFailed, match="not finite"):
        collectives.check_dp(mesh, init_mlp(0, (8, 32, 4)), _nan_like(x), y)


@pytest.mark.parametrize("bad", [NAN, INF, np.float32(NAN), np.array(INF)])
def test_numeric_answers_must_be_finite(bad):
    with pytest.raises(framework.Wrong, match="not a finite number"):
        framework.as_number(bad)
    with pytest.raises(framework.Wrong, match="not a finite number"):
        framework.expect_number(bad, 1.0)


def test_array_answers_must_be_finite():
    with pytest.raises(framework.Wrong, match="NaN or infinite"):
        framework.expect_array(np.array([1.0, INF], np.float32), np.ones(2, np.float32))


def test_a_build_checker_fails_nan_learner_code():
    def total(x):  # the right collective, a NaN result
        return jnp.full((), jnp.nan)

    with pytest.raises(ExerciseFailed, match="✗"):
        exercises.check_total(total, jnp.arange(64.0))


# --- escapes from the time limit ----------------------------------------------------------

@pytest.fixture
def short_limits(monkeypatch):
    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)
    monkeypatch.setattr(framework, "CHECK_TIME_LIMIT_S", 3)


@framework.checker("Probe")
def check_probe(fn, compare=None):
    result = framework.call(fn, 3)
    if compare is not None and not result == compare:
        raise framework.Wrong("different")
    jax.jit(fn).lower(3).compile()  # a second trace, outside `call`
    return ""


def test_a_loop_on_the_second_trace_is_stopped(short_limits):
    traces = []

    def sneaky(n):
        traces.append(1)
        while len(traces) > 1:  # the first trace returns, the second never does
            pass
        return n

    start = time.perf_counter()
    with pytest.raises(ExerciseFailed, match="more than 3 s and was stopped"):
        check_probe(sneaky)
    assert time.perf_counter() - start < 8


def test_a_compiled_endless_loop_is_reported_and_the_kernel_goes_on(short_limits):
    def forever(n):
        return jax.lax.while_loop(lambda c: c[0] > -1.0, lambda c: (c[0] + 1.0, c[1]),
                                  (jnp.float32(n), jnp.float32(0)))[1]

    start = time.perf_counter()
    with pytest.raises(ExerciseFailed, match="inside compiled code"):
        check_probe(forever)
    assert time.perf_counter() - start < 10
    assert float(jax.jit(lambda v: v + 1)(1.0)) == 2.0  # JAX still works beside it


def test_sys_exit_is_a_wrong_answer():
    def leave(n):
        sys.exit(3)

    with pytest.raises(ExerciseFailed, match=r"sys.exit\(3\)"):
        check_probe(leave)
    with pytest.raises(ExerciseFailed, match="SystemExit"):
        exercises.check_total(lambda x: sys.exit(), jnp.arange(64.0))


def test_resetting_the_itimer_does_not_defeat_the_limit(short_limits):
    def reset(n):
        if hasattr(signal, "setitimer"):
            try:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, signal.SIG_IGN)
            except ValueError:  # the checker runs it outside the main thread
                pass
        while True:
            pass

    start = time.perf_counter()
    with pytest.raises(ExerciseFailed, match=r"more than .* s"):
        check_probe(reset)
    assert time.perf_counter() - start < 8


def test_an_eq_that_never_returns_is_stopped(short_limits):
    class Sticky:
        def __eq__(self, other):
            while True:
                pass

    with pytest.raises(ExerciseFailed, match="more than 3 s and was stopped"):
        check_probe(lambda n: Sticky(), compare=1)


# --- answers: NumPy, Fraction, bool, dict keys --------------------------------------------

def test_numbers_accept_numpy_and_fraction():
    for value in (3, 3.0, np.int64(3), np.float32(3), Fraction(6, 2), jnp.float32(3),
                  np.array(3)):
        assert framework.as_number(value) == 3.0
    assert framework.as_integer(np.int16(4)) == 4
    assert framework.as_integer(Fraction(8, 2)) == 4
    with pytest.raises(framework.Wrong, match="whole number"):
        framework.as_integer(Fraction(7, 2))


def test_bools_accept_numpy_bools_only():
    assert framework.as_bool(np.bool_(True)) is True and framework.as_bool(False) is False
    for bad in (1, "yes", None):
        with pytest.raises(framework.Wrong, match="True or False"):
            framework.as_bool(bad)


def test_only_keys_refuses_an_undocumented_key():
    assert framework.only_keys({"a": 1}, ["a", "b"]) == {"a": 1}
    with pytest.raises(framework.Wrong, match="'efficiency', which this exercise does not use"):
        framework.only_keys({"a": 1, "efficiency": 5.0}, ["a", "b"])
    with pytest.raises(framework.Wrong, match="no key 'b'"):
        framework.only_keys({"a": 1}, ["a", "b"], required=["a", "b"])


def test_specific_checkers_take_numpy_fraction_and_refuse_extra_keys():
    from tpviz.collectives import exercises as cx
    from tpviz.collectives.plan import plan

    want = plan("parameter-server", "all-reduce", cx.PS_K, cx.PS_V).time(0.0, cx.PS_BETA)
    exercises.check_server_seconds(Fraction(want).limit_denominator(10**12))
    exercises.check_server_seconds(np.float64(want))
    best, _line = cx.buckets.best_bucket(cx.BUCKET_TIMES, cx.BUCKET_BYTES, devices=cx.BUCKET_K,
                                         alpha=cx.BUCKET_ALPHA, beta=cx.BUCKET_BETA)
    line = cx.buckets.simulate(cx.BUCKET_TIMES, cx.BUCKET_BYTES, best, devices=cx.BUCKET_K,
                               alpha=cx.BUCKET_ALPHA, beta=cx.BUCKET_BETA)
    exercises.check_bucket_size({"bucket_bytes": np.int64(best),
                                 "all_reduces": np.int64(len(line.buckets)),
                                 "exposed_ms": Fraction(line.exposed * 1e3)})
    exercises.check_same_as_big_batch({k: np.bool_(v) for k, v in cx.TRUTH.items()})
    with pytest.raises(ExerciseFailed, match="'efficiency', which this exercise does not use"):
        exercises.check_3d_design({"t": 8, "p": 2, "d": 4, "microbatch": 1, "zero_stage": 1,
                                   "recompute": True, "sequence_parallel": True,
                                   "efficiency": 5.0})


# --- size guards: each answers at once, naming the limit and the fix ----------------------

def _pl(module, name):
    import importlib

    return getattr(importlib.import_module(f"tpviz.{module}"), name)


SIZE_GUARDS = [
    (lambda: _pl("collectives.plan", "plan")("ring", "all-reduce", 20000, 1e6), "N <= 256"),
    (lambda: _pl("collectives", "render_collectives")("tree", 4096), "at most 64"),
    (lambda: _pl("collectives.plan", "time")("naive", 10**6, 1e6, 1e-6, 1e9), "N <= 256"),
    (lambda: _pl("layouts", "blocks")((4096, 4096), "A[I_X, J_Y]", {"X": 4096, "Y": 4096}),
     "more than the bound"),
    (lambda: _pl("autoshard", "stages")([1.0] * 2000, 8, 8, [(1,)]), "fewer, larger blocks"),
    (lambda: _pl("autoshard", "stages")([1.0] * 2000, 8, 8, [(1,), (2,)]),
     "fewer, larger blocks"),
    (lambda: _pl("moe", "render_moe")(experts=2**20, tokens=2**20), "Route fewer tokens"),
    (lambda: _pl("mesh2d", "best_mesh")(64, 128, 512, 10**15), "more than the bound"),
]


@pytest.mark.parametrize(("call", "words"), SIZE_GUARDS)
def test_size_guards_answer_at_once(call, words):
    start = time.perf_counter()
    with pytest.raises((ValueError, TypeError), match=words):
        call()
    assert time.perf_counter() - start < 2


def test_setup_devices_refuses_more_than_memory_allows(monkeypatch):
    from tpviz.core import host_memory
    from tpviz.errors import DeviceSetupError

    monkeypatch.setattr(host_memory, "_memory_limits", lambda: (8 * 2**30, math.inf))
    with pytest.raises(DeviceSetupError, match=r"ulimit -v.*at most 384 devices"):
        host_memory.refuse_beyond_memory(1024)
    host_memory.refuse_beyond_memory(8)


def test_make_mesh_refuses_a_bare_string():

    with pytest.raises(TypeError, match=r"axis_names must be a list or tuple.*write \('data',\)"):
        tpviz.make_mesh((8,), "data")


def test_wrong_results_fixed():
    from jax.sharding import PartitionSpec as P

    from tpviz import autoshard, together
    from tpviz.core.layout import dtype_size
    from tpviz.errors import ArgumentError, ShardingError

    a = autoshard.reshard((1024, 1024), "A[I_X, J]", "A[I, J_X]", {"X": 4})
    b = autoshard.reshard((1024, 1024), P("X", None), P(None, "X"), {"X": 4})
    assert [c.bytes for c in a] == [c.bytes for c in b] == [1024 * 1024 * 4 // 4]
    with pytest.raises(ArgumentError, match="tensor=7 must divide hidden=4096"):
        together.activation_bytes(2048, 1, 4096, 32, tensor=7)
    with pytest.raises(ArgumentError, match="at most 1"):
        together.plan("GPT-3 13B", "A100 80GB (Selene)", 8, 2, 4, efficiency=5.0)
    with pytest.raises(ShardingError, match="packs several values into a byte"):
        dtype_size("int4")
    with pytest.raises(ShardingError, match="old code for int32"):
        dtype_size("i4")
    assert dtype_size("bf16") == 2 and dtype_size("int8") == 1


def test_system_names_go_through_one_lookup():
    from tpviz.core import cost
    from tpviz.errors import ArgumentError

    assert cost.system("h100 (nvlink)") is cost.SYSTEMS["H100 (NVLink)"]
    p = mesh2d.plan(64, 128, 512, (4, 2), "bf16")
    assert mesh2d.step_time(p, "TPU v5e (ICI)") == mesh2d.step_time(
        p, cost.SYSTEMS["TPU v5e (ICI)"])
    for call in (lambda: mesh2d.step_time(p, "H100"),
                 lambda: moe.plan(4096, 32, 2, 1.25, 8).time("H100"),
                 lambda: matmul.draw.figure(matmul.plan((16, 32), (32, 64), "In[B_X, D]",
                                                         "W1[D, F]", {"X": 8}), system="H100")):
        with pytest.raises(ArgumentError, match="'H100 \\(NVLink\\)'"):
            call()


# --- the second probe (new chapters and the cross-process command) ---------------------------

@pytest.mark.parametrize("argv", [["--processes", "0"], ["--processes", "100"],
                                  ["--devices-per-process", "100000"], ["--timeout", "nan"],
                                  ["--timeout", "-5"], ["--processes", "3"],
                                  ["--script", "/nonexistent/script.py"]])
def test_cluster_arguments_are_refused_before_any_process_starts(argv, capsys):
    from tpviz.cluster.__main__ import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert "error: " in capsys.readouterr().err


@pytest.mark.parametrize(("kwargs", "words"), [
    (dict(lrs=(NAN,)), "lrs"), (dict(lrs=()), "one or more"), (dict(labels=()), "empty"),
    (dict(labels="synchronous"), "labels must be a list or tuple"), (dict(labels=None), "tuple"),
    (dict(width=0), "width"), (dict(rows=2.5), "rows"), (dict(momentum=1.0), "below 1"),
    (dict(momentum=NAN), "momentum"), (dict(steps=5000, width=256), "the work"),
])
def test_stale_training_refuses_bad_arguments_before_compiling(kwargs, words):
    from tpviz.asyncpipe import stale

    start = time.perf_counter()
    with pytest.raises((ValueError, TypeError), match=words):
        stale.train(**kwargs)
    assert time.perf_counter() - start < 2


def _new_chapter_calls():
    from tpviz.asyncpipe import formulas
    from tpviz.context import compare, plan, zigzag_order
    from tpviz.core import hardware as hw
    from tpviz.pytorch import plan as torch_plan

    return [
        (lambda: hw.matmul_intensity(0, 4096, 16384), "b must be a positive integer"),
        (lambda: hw.matmul_intensity(2.5, 4096, 16384), "b must be an integer"),
        (lambda: hw.data_parallel_batch(NAN, 1e11), "flops must be a finite number"),
        (lambda: hw.tensor_parallel_limit(1e15, -1.0, 16384), "bandwidth must be positive"),
        (lambda: hw.best_fsdp(1024.0, 16384, True), "devices must be an integer"),
        (lambda: hw.tpu("TPU v5e", None), "mesh_shape must be a positive integer or a list"),
        (lambda: formulas.paper_bubble("nope", 4, 8), "not one of the choices"),
        (lambda: formulas.paper_bubble("1f1b", 4, -3), "m must be a positive integer"),
        (lambda: zigzag_order(64, NAN), "devices must be an integer"),
        (lambda: plan("ring", 1024, 8, None, 8), "hidden must be an integer"),
        (lambda: compare.layer("ring", 1024, 8, 512, 8, causal="yes"), "True or False"),
        (lambda: compare.layer("ring", 1024, 8, 512, 8, system=None), "system must be a System"),
        (lambda: compare.hiding_block(0), "hidden must be a positive integer"),
        (lambda: torch_plan.parse("nope"), "not one of torch's pipeline actions"),
        (lambda: torch_plan.parse(5), "action must be torch's action as text"),
        (lambda: torch_plan.compare("Schedule1F1B", {"x": ["0F0"]}, 1), "ranks must be 0"),
        (lambda: torch_plan.compare("Schedule1F1B", None, 1), "order must be a dict"),
        (lambda: torch_plan.fsdp_plan(10**6, 4, 2.5, True), "units must be an integer"),
        (lambda: torch_plan.fsdp_plan(10**6, 4, 2, None), "True or False"),
    ]


def test_the_new_chapters_refuse_bad_input_clearly():
    from tpviz.errors import TpvizError

    for call, words in _new_chapter_calls():
        start = time.perf_counter()
        with pytest.raises(TpvizError, match=words):
            call()
        assert time.perf_counter() - start < 2
    from tpviz.pytorch import plan as torch_plan
    assert torch_plan.parse("1SEND_F0") == [] and torch_plan.parse("0UNSHARD") == []
