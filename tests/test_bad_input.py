"""Bad input, tried as a new user and a careless learner would: every call gets a clear error
(its type, and a message that names the argument), never a raw error from deep inside, a hang
or a crash; right answers in another numeric type are accepted; no checker false-passes."""

from __future__ import annotations

import time
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz import autoshard, exercises, megatron, mesh2d, moe, pipeline, zero
from tpviz.core import compiled, layout, notation
from tpviz.core import exercises as framework
from tpviz.errors import (
    ArgumentError,
    DeviceSetupError,
    NotationError,
    ScheduleError,
    ShardingError,
    ZeroError,
)
from tpviz.exercises import ExerciseFailed
from tpviz.layouts import draw as layouts_draw

SCHEDULE = pipeline.schedule("1f1b", 4, 8)


def mesh4(axis):
    return tpviz.make_mesh((4,), (axis,), devices=tpviz.devices.chosen_devices()[:4])


MLP = megatron.init(16, 32, kind="mlp")
X = np.zeros((2, 4, 16), np.float32)

# (call, error type, words the message must hold: the argument's name or the fix)
BAD = [
    # devices and meshes
    (lambda: tpviz.setup_devices(0), DeviceSetupError, "n must be a positive integer"),
    (lambda: tpviz.setup_devices(-3), DeviceSetupError, "positive integer"),
    (lambda: tpviz.setup_devices(2.5), TypeError, "n must be an integer, got 2.5"),
    (lambda: tpviz.setup_devices("8"), TypeError, "n must be an integer"),
    (lambda: tpviz.setup_devices(True), TypeError, "n must be an integer, got True"),
    (lambda: tpviz.setup_devices(100_000), DeviceSetupError, "at most 4,096 emulated"),
    (lambda: tpviz.setup_devices(32768), DeviceSetupError, "at most 4,096 emulated"),
    (lambda: tpviz.make_mesh((2, 4), ("X",)), ShardingError, "give one name per axis"),
    (lambda: tpviz.make_mesh((2, 4), ("X", "X")), ShardingError, "repeat a name"),
    (lambda: tpviz.make_mesh((0, 8), ("X", "Y")), ArgumentError, r"shape\[0\]"),
    (lambda: tpviz.make_mesh((2.0, 4), ("X", "Y")), TypeError, r"shape\[0\] must be an integer"),
    (lambda: tpviz.make_mesh((4, 4), ("X", "Y")), ShardingError, "needs 16 devices"),
    # notation and layouts
    (lambda: notation.parse("A[I_model, J]"), NotationError, "multi-letter axis names need braces"),
    (lambda: notation.parse("A[I_data, J]"), NotationError, r"I_\{data\}"),
    (lambda: notation.parse("A[I_X1, J]"), NotationError, "'X1'"),
    (lambda: notation.parse("A[I_1, J]"), NotationError, "mesh axes are single ASCII letters"),
    (lambda: notation.parse("A[I_Χ, J]"), NotationError, "Greek"),
    (lambda: notation.parse("A(I, J)"), NotationError, "write an array name"),
    (lambda: notation.parse(42), TypeError, "notation must be a string, got 42"),
    (lambda: layout.shard_shape((8, 16), "A[I_X, J]", [("X", 2)]), TypeError,
     "mesh_shape must be a mesh shape"),
    (lambda: layout.shard_shape((8, 16), "A[I_X, J]", {"X": 0}), ArgumentError,
     r"mesh_shape\['X'\]"),
    (lambda: layout.shard_shape("8x16", "A[I_X, J]", {"X": 2}), TypeError,
     "shape must be a list or tuple"),
    (lambda: layout.shard_shape((8, -1), "A[I_X, J]", {"X": 2}), ArgumentError, r"shape\[1\]"),
    (lambda: layout.shard_shape((7, 16), "A[I_X, J]", {"X": 2}), ShardingError, "does not divide"),
    (lambda: layout.shard_shape((8, 16), "A[I_Z, J]", {"X": 2}), ShardingError,
     "unknown mesh axis 'Z'"),
    (lambda: layout.dtype_size("float33"), ShardingError, "unknown dtype"),
    (lambda: layouts_draw.array(np.ones((4, 4))), TypeError, "x must be a jax.Array"),
    (lambda: layouts_draw.sharding((2, 2, 2), P(), {"X": 2}), ShardingError, "1D or 2D"),
    # compiled programs
    (lambda: compiled.collectives(42, np.ones(4)), TypeError, "program must be a function"),
    (lambda: compiled.collectives(lambda x: x @ x, np.ones((2, 3))), Exception,
     "does not compile"),
    # pipeline plans
    (lambda: pipeline.schedule("1f1b", 4096, 8192), ScheduleError, "67,108,864 ops"),
    (lambda: pipeline.schedule("1F1B", 4, 8), ScheduleError, "Did you mean '1f1b'"),
    (lambda: pipeline.schedule("pipedream-3bw", 4, 8), ScheduleError, "name = 'pipedream-3bw'"),
    (lambda: pipeline.schedule("gpipe", 4.0, 8), TypeError, "stages must be an integer"),
    (lambda: pipeline.schedule("gpipe", 4, 0), ScheduleError, "microbatches must be a positive"),
    (lambda: pipeline.schedule("gpipe", 4, 8, 2), ScheduleError, "use 'interleaved'"),
    (lambda: pipeline.schedule("interleaved", 4, 6, 2), ScheduleError, "multiple of 4"),
    (lambda: pipeline.simulate("1f1b"), TypeError, "sched must be a Schedule"),
    (lambda: pipeline.simulate(SCHEDULE, forward=-1), ArgumentError, "forward must be positive"),
    (lambda: pipeline.simulate(SCHEDULE, forward=0, backward=0), ArgumentError, "forward"),
    (lambda: pipeline.simulate(SCHEDULE, forward=float("nan")), ArgumentError,
     "forward must be a finite number"),
    (lambda: pipeline.simulate(SCHEDULE, backward=float("inf")), ArgumentError, "backward"),
    (lambda: pipeline.simulate(SCHEDULE, p2p=-1), ArgumentError, "p2p must be at least 0"),
    (lambda: pipeline.balance([1, float("nan"), 3], 2), ScheduleError, r"costs\[1\]"),
    (lambda: pipeline.balance([1, -2, 3], 2), ScheduleError, r"costs\[1\] must be at least 0"),
    (lambda: pipeline.balance("1, 2, 3", 2), TypeError, "costs must be a list"),
    (lambda: pipeline.balance([1, 2], 3), ScheduleError, "at most 2 stages"),
    (lambda: pipeline.balance([1, 2], 0), ScheduleError, "stages must be a positive integer"),
    (lambda: pipeline.bubble_formula("gpipe", -4, 8), ArgumentError,
     "stages must be a positive integer"),
    (lambda: pipeline.bubble_formula("gpip", 4, 8), ArgumentError, "Did you mean 'gpipe'"),
    # ZeRO plans
    (lambda: zero.memory(1e9, 8, 4), ZeroError, "stage = 4"),
    (lambda: zero.memory(1e9, 8, "2"), ZeroError, "stage = '2'"),
    (lambda: zero.memory(-1, 8, 1), ZeroError, "params must be positive"),
    (lambda: zero.memory(float("nan"), 8, 1), ZeroError, "params must be a finite number"),
    (lambda: zero.memory(1e9, 0, 1), ZeroError, "devices must be a positive integer"),
    (lambda: zero.memory(1e9, 2.5, 1), TypeError, "devices must be an integer"),
    (lambda: zero.communication(1e9, 8, 1, param_bytes=0), ZeroError, "param_bytes"),
    (lambda: zero.smallest_devices(1e9, 2, -5), ZeroError, "capacity must be positive"),
    # Megatron
    (lambda: megatron.specs("mlpp"), ShardingError, "unknown kind 'mlpp'"),
    (lambda: megatron.plan(16, 30, 64, 4, 4), ShardingError, "not divisible by 4 heads"),
    (lambda: megatron.plan(16, 48, 64, 6, 4), ShardingError, "6 heads do not split"),
    (lambda: megatron.plan(16, 32, 64, 4, 4.0), TypeError, "devices must be an integer"),
    (lambda: megatron.plan(16, 32, 64, 4, 4, kind="mlpp"), ShardingError, "kind = 'mlpp'"),
    (lambda: megatron.check("mlp", mesh4("model"), X, X,
                            {"wq": MLP["w1"]}), ShardingError, "params must hold the keys 'w1', 'w2'"),
    (lambda: megatron.check("mlp", mesh4("tp"), X, X, MLP), ShardingError,
     "not 'model'"),
    (lambda: megatron.check("block", mesh4("model"), X, X,
                            megatron.init(16, 32)), ShardingError, "needs head_dim"),
    # the 2D mesh
    (lambda: mesh2d.plan(16, 8, 32, (4, 2.0)), TypeError, "mesh"),
    (lambda: mesh2d.plan(15, 8, 32, (4, 2)), ShardingError, "batch = 15 does not divide"),
    (lambda: mesh2d.plan(16, 8, 32, (2, 2, 2)), ShardingError, "a 2D mesh shape is"),
    # widgets: never clamp, always name the argument
    (lambda: tpviz.explore_zero(stage=4), ArgumentError, r"explore_zero\(stage=4\)"),
    (lambda: tpviz.explore_zero(devices=3), ArgumentError, "explore_zero: devices = 3"),
    (lambda: tpviz.explore_pipeline(stages=64), ArgumentError, r"explore_pipeline\(stages=64\)"),
    (lambda: tpviz.explore_pipeline(name="1F1B"), ArgumentError, "Did you mean '1f1b'"),
    (lambda: tpviz.explore_megatron(hidden=1000), ArgumentError, "hidden = 1000"),
    (lambda: tpviz.explore_layout(notation=3), TypeError,
     "explore_layout: notation must be a string, got 3"),
    (lambda: tpviz.explore_mesh2d(data=3), ArgumentError, "data = 3"),
    (lambda: tpviz.explore_matmul(system="TPU"), ArgumentError, "system = 'TPU'"),
    # expert parallelism (MoE)
    (lambda: moe.route(np.zeros(8), 2, 1.0), ArgumentError, r"logits must be an array \[T, E\]"),
    (lambda: moe.route(np.zeros((8, 4)), 2, 1.0, groups=0), ArgumentError,
     "groups must be a positive integer"),
    (lambda: moe.keep(np.zeros((8, 2), int), 4, 2, groups=0), ArgumentError,
     "groups must be a positive integer"),
    (lambda: moe.render_moe(system="H100"), ArgumentError, "system = 'H100'"),
    (lambda: moe.gspmd_forward(mesh4("X"), 2, 2), ShardingError, "'expert' is not an axis of mesh"),
    (lambda: moe.plan(64, 8, 2, "1.25", 8), TypeError, "capacity_factor must be a number"),
    (lambda: moe.plan(64, 8.0, 2, 1.25, 8), TypeError, "experts must be an integer"),
    # automatic parallelization
    (lambda: autoshard.stages(["a"], 4, 8, [(1,)]), TypeError,
     r"layer_costs\[0\] must be a number"),
    (lambda: autoshard.stages(None, 4, 8, [(1,)]), TypeError,
     "layer_costs must be a sequence"),
    (lambda: autoshard.Builder(x=(8, 12)).heads("h", "x", 0), ArgumentError,
     "heads must be a positive integer"),
    (lambda: autoshard.solve(autoshard.mlp(64, 16, 64), {"X": 4}, "H100"), ArgumentError,
     "system = 'H100'"),
    (lambda: autoshard.solve(autoshard.mlp(64, 16, 64), {"X": 4.0}, "H100 (NVLink)"), TypeError,
     r"mesh_shape\['X'\] must be an integer"),
    (lambda: autoshard.mlp(64.0, 16, 64), TypeError, "batch must be an integer"),
]


@pytest.mark.parametrize(("call", "error", "words"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_gets_a_clear_error(call, error, words):
    start = time.perf_counter()
    with pytest.raises(error, match=words) as info:
        call()
    assert isinstance(info.value, tpviz.errors.TpvizError)  # ours, not a raw one from inside
    assert isinstance(info.value, ValueError | TypeError)
    assert time.perf_counter() - start < 30  # refused, not attempted


def test_there_are_at_least_60_bad_inputs():
    assert len(BAD) >= 60


def test_size_guards_answer_within_a_second():
    for call in (lambda: tpviz.setup_devices(100_000), lambda: pipeline.schedule("1f1b", 4096, 8192)):
        start = time.perf_counter()
        with pytest.raises(ValueError):
            call()
        assert time.perf_counter() - start < 1


def test_numpy_and_jax_integers_are_integers():
    n = np.int64(8)
    assert len(tpviz.setup_devices(n, verbose=False)) == 8
    assert tpviz.make_mesh((np.int64(2), np.int32(4)), ("X", "Y")).size == 8
    assert pipeline.schedule("gpipe", np.int64(4), np.int32(8)).stages == 4
    assert pipeline.balance(np.array([4, 1, 1, 4]), np.int64(2)).bounds == ((0, 2), (2, 4))
    assert megatron.plan(np.int64(16), 32, 64, 4, np.int64(4)).devices == 4
    assert mesh2d.plan(np.int64(16), 8, 32, (np.int64(4), 2)).batch == 16
    assert zero.memory(np.int64(1_000_000), np.int64(8), np.int64(2)).total == pytest.approx(
        2e6 + 14e6 / 8)


def test_mesh_shape_may_be_a_mesh():
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))
    assert layout.shard_shape((8, 16), "A[I_X, J_Y]", mesh) == (4, 4)


def test_restart_is_advised_only_when_needed():
    try:
        tpviz.setup_devices(4, verbose=False)
        with pytest.raises(ShardingError, match="again \\(no restart needed") as info:
            tpviz.make_mesh((2, 4), ("X", "Y"))
        assert "Restart the kernel" not in str(info.value)
    finally:
        tpviz.setup_devices(8, verbose=False)
    assert tpviz.make_mesh((2, 4), ("X", "Y")).size == 8


# --- checkers: no false pass, other numeric types accepted, one call, a time limit ---------------

def test_holders_want_exact_device_numbers():
    for wrong in ("0123", [0, 1, 2, 3.9], [0.0, 1, 2, 3], ["0", "1", "2", "3"]):
        with pytest.raises(ExerciseFailed):
            exercises.check_holders(wrong)
    exercises.check_holders({0, 1, 2, 3})
    exercises.check_holders(np.array([3, 2, 1, 0]))
    exercises.check_holders([np.int64(0), 1, 2, jnp.int32(3)])


def test_rows_over_mesh_must_cover_every_device():
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    four = tpviz.make_mesh((2, 2), ("X", "Y"), devices=tpviz.devices.chosen_devices()[:4])
    with pytest.raises(ExerciseFailed, match="all 8 devices"):
        exercises.check_rows_over_mesh(jax.device_put(x, NamedSharding(four, P(("X", "Y")))), x)
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))
    exercises.check_rows_over_mesh(jax.device_put(x, NamedSharding(mesh, P(("X", "Y")))), x)


def test_right_answers_in_other_numeric_types_are_accepted():
    exercises.check_bytes_per_device(jnp.int32(8388608))
    exercises.check_bytes_per_device(np.int64(8388608))
    exercises.check_bubble(Fraction(7, 39))
    exercises.check_bubble(np.float32(7 / 39))
    exercises.check_weight_versions(np.array([6, 5, 4, 3, 2, 1]))
    exercises.check_weight_versions((6, 5, 4, 3, 2, 1))
    exercises.check_microbatches(np.int64(133))
    for wrong in ("8388608", True, [8388608], Fraction(1, 2)):
        with pytest.raises(ExerciseFailed):
            exercises.check_bytes_per_device(wrong)


def test_checker_calls_the_learner_once_per_case_and_caps_its_output(capsys):
    mesh = tpviz.make_mesh((8,), ("X",))
    calls = []

    def total(x):
        calls.append(1)
        print("x" * 10_000)
        return jax.shard_map(lambda b: jax.lax.psum(b.sum(), "X"), mesh=mesh, in_specs=P("X"),
                             out_specs=P())(x)

    exercises.check_total(total, jnp.arange(64.0))
    # once per input the check makes (each of another size), printing shown once
    assert len(calls) == len(tpviz.layouts.exercises.TOTAL.cases)
    out = capsys.readouterr().out
    assert "more characters of your output not shown" in out and len(out) < 3000


def test_a_learner_function_that_never_returns_is_stopped(monkeypatch):
    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def slow(costs, p):
        end = time.perf_counter() + 60
        while time.perf_counter() < end:
            pass

    def spin(p, m, d):
        while True:
            pass

    for check, fn in ((exercises.check_balance, slow), (exercises.check_one_f_one_b, spin)):
        start = time.perf_counter()
        with pytest.raises(ExerciseFailed, match="more than 1 s and was stopped"):
            check(fn)
        assert time.perf_counter() - start < 5


def test_an_empty_assertion_names_its_line():
    scope = {}  # defined outside pytest's assertion rewriting, as in a notebook
    exec("def total(x):\n    assert x.shape == (3,)\n", scope)
    total = scope["total"]

    with pytest.raises(ExerciseFailed, match=r"AssertionError: \(no message\) at line \d+"):
        exercises.check_total(total, jnp.arange(64.0))


def test_lower_case_op_kinds_get_a_specific_message():
    def lower(p, m, d):
        return [(k.lower(), i) for k, i in (("F", 0), ("B", 0))]

    with pytest.raises(ExerciseFailed, match="capital letter 'F'"):
        exercises.check_one_f_one_b(lower)


# --- issue 42: every example of the issue, by category -----------------------------------------

def _issue_42():
    import math

    from tpviz import asyncpipe, collectives, context, layouts, together
    from tpviz.asyncpipe import formulas
    from tpviz.collectives.run import init_mlp
    from tpviz.core import cost
    from tpviz.core import hardware as hw
    from tpviz.machines import draw as machines_draw
    from tpviz.pipeline.explore import render_pipeline
    from tpviz.zero import check as zero_check

    nan = math.nan
    model = together.MODELS["GPT-3 13B"]
    ring = collectives.plan("ring", "all-reduce", 8, 1e6)
    mesh = {"X": 8}
    four = pipeline.schedule("1f1b", 4, 8)
    logits = np.full((8, 4), nan)
    return {
        "negative, NaN or fractional sizes and times": [
            (lambda: megatron.shapes("mlp", -16, 32), "hidden must be a positive integer"),
            (lambda: model.flops(-5), "batch must be a positive integer, got -5"),
            (lambda: model.flops(nan), "batch must be an integer, got nan"),
            (lambda: model.flops(2.5), "batch must be an integer, got 2.5"),
            (lambda: cost.estimate(nan, [], "H100 (NVLink)"), "flops must be a finite number"),
            (lambda: cost.estimate(-1.0, [], "H100 (NVLink)"), "flops must be at least 0"),
            (lambda: collectives.lower_bound(8, -1), "nbytes must be at least 0, got -1"),
            (lambda: ring.time(-1e-6, 1e9), "alpha must be at least 0"),
            (lambda: zero_check.train(2, steps=-1), "steps must be a positive integer"),
            (lambda: context.compare.flops(-1024, 512, 8), "sequence must be a positive"),
            (lambda: autoshard.Builder(x=(8, -8)), r"x\[1\] must be a positive integer"),
            (lambda: cost.SYSTEMS["H100 (NVLink)"].network(-8), "devices must be a positive"),
            (lambda: hw.gpu_cluster("H100", 10**30), "more than the bound of 1,048,576"),
            (lambda: hw.gpu_cluster("H100", 16).collective_time("all-reduce", 1e6, gpus=1024),
             "gpus = 1024 is more than this cluster's 16 GPUs"),
        ],
        "truthy strings taken as flags": [
            (lambda: hw.tpu("TPU v5e", (4, 4), wrap=("no", "no")),
             r"wrap\[0\] must be True or False, got 'no'"),
            (lambda: context.plan("ring", 1024, 8, 512, 8, training="yes"),
             "training must be True or False, got 'yes'"),
            (lambda: mesh2d.plan(64, 128, 512).sent(training="no"),
             "training must be True or False, got 'no'"),
        ],
        "names that are not names": [
            (lambda: tpviz.make_mesh((2, 4), ("X", 3)), r"axis_names\[1\] must be a string"),
            (lambda: context.mesh_of(8, axis=3), "axis must be a string, got 3"),
            (lambda: layouts.replication("A[I_Q, J]", mesh), "'Q'"),
            (lambda: layouts.to_notation("A[I_X]"), "spec must be a PartitionSpec"),
        ],
        "NaN through the numerics": [
            (lambda: moe.top_k(logits, 2), "logits holds 32 NaN or infinite value"),
            (lambda: moe.keep(np.array([[0, -1]]), 4, 1), "each must be an expert's index"),
            (lambda: asyncpipe.train(labels=("synchronous",), steps=8, lrs=(1e300,), rows=2,
                                     width=4, seeds=(0,)), "a learning rate above 10"),
            (lambda: formulas.paper_bubble("chimera", 3, 8), "holds for m a multiple of p"),
        ],
        "raw tracebacks": [
            (lambda: pipeline.steady_state(four, durations={"F": 1.0}), "no value for 'B'"),
            (lambda: hw.tpu("TPU v5e", (4, 4), wrap=5), "wrap must be a list or tuple"),
            (lambda: pipeline.draw.gantt("1f1b"), "t must be a Timeline"),
            (lambda: layouts.draw.sharding("8x8", "A[I_X, J]", mesh), "shape must be a list"),
            (lambda: context.combine(np.ones((2, 4, 8)), np.ones((2, 4)), np.ones((2, 4, 8)),
                                     np.ones((2, 3))), "must have one shape"),
            (lambda: collectives.check_dp(tpviz.make_mesh((8,), ("X",)), init_mlp(0, (8, 32, 4)),
                                          np.zeros((0, 8)), np.zeros((0, 4))), "x is empty"),
        ],
        "unbounded sizes": [
            (lambda: machines_draw.torus((256, 256)), "more than the bound of 64"),
            (lambda: pipeline.steady_state(four, steps=10**6), "steps × ops of one step"),
            (lambda: context.causal_work(10**9), "more than the bound"),
            (lambda: pipeline.schedule("pipedream", 10**6, 2), "ops"),
            (lambda: asyncpipe.versions("sync", 10**9), "more than the bound of 65,536"),
            (lambda: context.zigzag_order(2**40, 8), "more than the bound"),
            (lambda: context.check("ring", 2**20, 8), "batch × heads × sequence²"),
            (lambda: render_pipeline("1f1b", 512, 1024, 1, 2.0), "bars of the Gantt chart"),
        ],
    }


ISSUE_42 = [(category, i) for category, calls in _issue_42().items() for i in range(len(calls))]


@pytest.mark.parametrize(("category", "index"), ISSUE_42,
                         ids=[f"{c.split()[0]}-{i}" for c, i in ISSUE_42])
def test_every_example_of_issue_42_gets_a_clear_error_at_once(category, index):
    call, words = _issue_42()[category][index]
    start = time.perf_counter()
    with pytest.raises((ValueError, TypeError), match=words) as info:
        call()
    assert isinstance(info.value, tpviz.errors.TpvizError), info.value
    assert time.perf_counter() - start < 2


def test_the_cluster_command_refuses_an_empty_script(capsys):
    from tpviz.cluster.__main__ import main

    start = time.perf_counter()
    with pytest.raises(SystemExit) as stopped:
        main(["--script", ""])
    assert time.perf_counter() - start < 2
    assert stopped.value.code == 2
    assert "--script '': give the path of a Python script" in capsys.readouterr().err
