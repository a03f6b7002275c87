"""Issue 42, continued: functions the book calls by their module's path are checked like the
topics' own (a submodule's ``__all__`` publishes them), and a published function's result that
must be a size, a count or a time is refused when it is NaN or negative."""

from __future__ import annotations

import importlib
import inspect
import math
import sys

import pytest

import tpviz
from tpviz.core.kinds import Amount, Bytes, Count, Share, Time
from tpviz.core.public import public, published
from tpviz.core.publish import declared
from tpviz.errors import ArgumentError, ScheduleError, TpvizError

NAN = float("nan")


def _module(name: str):
    importlib.import_module(name.rsplit(".", 1)[0])  # the topic publishes its submodules
    return sys.modules[name]


def test_every_function_of_a_submodules_all_is_checked():
    seen = 0
    for topic in tpviz.TOPICS:
        for module in declared(importlib.import_module(f"tpviz.{topic}").__name__):
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

