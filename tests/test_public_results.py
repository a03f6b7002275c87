"""Issue 42, continued: functions the book calls by their module's path are checked like the
topics' own (a submodule's ``__all__`` publishes them), and a published function's result that
must be a size, a count or a time is refused when it is NaN or negative."""

from __future__ import annotations

import importlib
import inspect
import math
import sys

import pytest
from fuzzing import declared_targets

import tpviz
from tpviz.core.kinds import Amount, Bytes, Count, Share, Time
from tpviz.core.public import public, published
from tpviz.errors import ArgumentError, ScheduleError, TpvizError

NAN = float("nan")


def _module(name: str):
    importlib.import_module(name.rsplit(".", 1)[0])  # the topic publishes its submodules
    return sys.modules[name]


def test_every_function_of_a_submodules_all_is_checked():
    seen = 0
    for topic in tpviz.TOPICS:
        for module in declared_targets(importlib.import_module(f"tpviz.{topic}").__name__):
            for name in module.__all__:
                fn = getattr(module, name)
                if inspect.isfunction(fn):
                    seen += 1
                    assert published(fn) is not None, f"{module.__name__}.{name}"
                    assert published(fn).undeclared == (), f"{module.__name__}.{name}"
    assert seen >= 8  # collectives.plan, asyncpipe.formulas, pipeline.plan, autoshard.run


@pytest.mark.parametrize("alpha", [-1.0, NAN, math.inf, "1e-6"])
def test_collective_time_refuses_a_bad_latency(alpha):
    time = _module("tpviz.collectives.plan").time
    with pytest.raises(TpvizError, match="alpha"):
        time("ring", 8, 1e6, alpha, 1e9)


def test_collective_time_refuses_a_bad_bandwidth_and_size():
    time = _module("tpviz.collectives.plan").time
    for args in [(1e6, 1e-6, 0.0), (1e6, 1e-6, -1e9), (-1.0, 1e-6, 1e9), (NAN, 1e-6, 1e9)]:
        with pytest.raises(TpvizError):
            time("ring", 8, *args)


def test_collective_time_is_the_ring_formula():
    # ring all-reduce on N devices: 2(N-1) steps, each device sends 2(N-1)/N of V
    n, v, alpha, beta = 8, 1e6, 1e-6, 1e9
    want = 2 * (n - 1) * alpha + 2 * (n - 1) / n * v / beta
    assert _module("tpviz.collectives.plan").time("ring", n, v, alpha, beta) == \
        pytest.approx(want)


@pytest.mark.parametrize("name,p,m", [("chimera", 1, 1), ("chimera", 1, 4), ("chimera", 3, 6), ("chimera", 3, 3),
                                      ("dualpipe", 1, 8), ("dualpipe", 3, 12)])
def test_paper_bubble_refuses_an_odd_pipeline_for_the_paired_schedules(name, p, m):
    paper_bubble = _module("tpviz.asyncpipe.formulas").paper_bubble
    with pytest.raises(ScheduleError, match=r"p \(the stages\) must be even; got p = "):
        paper_bubble(name, p, m)


@pytest.mark.parametrize("args", [("chimera", 0, 4), ("1f1b", -2, 4), ("1f1b", 4, 2.5),
                                  ("zb-h1", 4, NAN), ("bogus", 4, 8), ("1f1b", True, 8)])
def test_paper_bubble_refuses_nonsense(args):
    with pytest.raises(TpvizError):
        _module("tpviz.asyncpipe.formulas").paper_bubble(*args)


def test_paper_bubble_is_each_papers_formula():
    paper_bubble = _module("tpviz.asyncpipe.formulas").paper_bubble
    assert paper_bubble("chimera", 4, 8) == pytest.approx(2 / 18)  # (p-2)/(2m+p-2)
    assert paper_bubble("1f1b", 4, 8) == pytest.approx(3 / 11)  # (p-1)/(m+p-1)
    assert paper_bubble("dualpipe", 4, 8) == pytest.approx(2 / 26)  # idle (p/2-1)·2 of 3m
    assert paper_bubble("chimera", 2, 2) == 0.0


# --- results --------------------------------------------------------------------------------

def _returning(kind, value):
    def f() -> kind:
        return value
    f.__annotations__["return"] = kind
    return public(f, label="demo.f")


SIZES = {"Time": Time, "Amount": Amount, "Bytes": Bytes, "Share": Share, "Count": Count,
         "int": int}


@pytest.mark.parametrize("kind", sorted(SIZES))
@pytest.mark.parametrize("value", [-1.0, -1, -1e-300, NAN])
def test_a_size_or_time_result_that_is_negative_or_nan_is_an_error(kind, value):
    with pytest.raises(ArgumentError, match=r"demo\.f: the result is (NaN|-1)"):
        _returning(SIZES[kind], value)()


@pytest.mark.parametrize("kind", sorted(SIZES))
def test_a_size_or_time_result_of_zero_or_more_is_returned(kind):
    assert _returning(SIZES[kind], 0)() == 0
    assert _returning(SIZES[kind], 0.5)() == 0.5


def test_a_plain_float_result_may_be_signed_but_never_nan():
    assert _returning(float, -2.5)() == -2.5  # a difference, a logarithm
    with pytest.raises(ArgumentError, match="the result is NaN"):
        _returning(float, NAN)()


def test_a_returned_tpviz_record_with_a_nan_field_is_an_error():
    from tpviz.pipeline import schedule, simulate

    t = simulate(schedule("1f1b", 2, 4))
    object.__setattr__(t, "makespan", NAN)  # as a formula outside its range would leave it
    with pytest.raises(ArgumentError, match="the result is NaN in its makespan"):
        _returning(type(t), t)()



# --- what benchmarks/probe_round2.py found --------------------------------------------------

def _second_probe_cases():
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from tpviz import autoshard, context, inference, layouts, moe, together

    probs = moe.softmax(np.random.default_rng(0).normal(size=(16, 8)))
    experts = np.stack([np.arange(16) % 8, (np.arange(16) + 1) % 8], axis=1)
    mesh = {"X": 2, "Y": 4}
    return [
        (lambda: layouts.replication(P("X", "X"), mesh), "spec: mesh axis 'X' is used twice"),
        (lambda: layouts.replication(P("X", "Y", "X"), mesh), "used twice"),
        (lambda: layouts.shard_shape((8, 16), P("X", "X"), mesh), "spec: mesh axis"),
        (lambda: layouts.to_notation(P("X", None), ndim=1), "ndim = 1, but spec"),
        (lambda: moe.aux_loss(-probs, experts), "probs holds"),
        (lambda: moe.aux_loss(probs, experts + 8), "experts holds 8 to 15"),
        (lambda: moe.aux_loss(probs, experts - 9), "experts holds -9"),
        (lambda: together.Model("x", 2, 64, 3), "hidden = 64 does not divide into heads = 3"),
        (lambda: together.Model("x", 2, 64, 4, kv_heads=3), "kv_heads = 3"),
        (lambda: together.Model("", 2, 64, 4), "name must be a non-empty string"),
        (lambda: together.activation_bytes(2048, 1, 2560, 3), "heads=3 must divide hidden"),
        (lambda: autoshard.layouts((), mesh), "shape = ()"),
        (lambda: inference.slice_shape("TPU v5e", 3), "chips = 3"),
        (lambda: inference.slice_shape("TPU v5e", 10**12), "chips"),
        (lambda: context.mesh_of(8, ulysses=3), "ulysses = 3 must divide devices = 8"),
        (lambda: tpviz.make_mesh((2, 4), ("X", "X")), "axis_names"),
    ]


def test_what_the_second_probe_found_is_refused_with_the_arguments_name():
    tpviz.setup_devices(8)
    for call, words in _second_probe_cases():
        with pytest.raises(TpvizError) as info:
            call()
        assert words in str(info.value), str(info.value)


def test_the_valid_neighbours_of_the_second_probes_cases_still_work():
    from jax.sharding import PartitionSpec as P

    from tpviz import autoshard, inference, layouts, together

    assert layouts.replication(P("X", None), {"X": 2, "Y": 4}) == 4  # Y's 4 devices share
    assert layouts.to_notation(P("X", None), ndim=3) == "A[I_X, J, K]"
    assert inference.slice_shape("TPU v5e", 16) == (4, 4)
    assert inference.slice_shape("TPU v5e", 8) == (4, 2)
    assert together.Model("x", 2, 64, 4, kv_heads=2).K == 2
    assert together.Model("x", 2, 64, 3, head_dim=16).d == 16  # head_dim given: no division
    assert len(autoshard.layouts((8, 16), {"X": 2})) == 3  # X on rows, on columns, or on neither
