"""Every public function refuses nonsense (issue 42): one mechanism checks every call against
the function's signature (:mod:`tpviz.core.public`), and this test walks every public function
(each topic's ``__all__`` and ``core``'s; see ``tests/fuzzing.py``) and gives each parameter,
in turn, values of the wrong kind while the others stay valid. Each call must end in a clear
error of tpviz (a ``ValueError`` or ``TypeError`` from ``tpviz.errors``; a refused value named
in the message, within 2 s) or a valid result, in a worker process under a time limit and a
memory cap. A new public function is walked without editing this file.
"""

from __future__ import annotations

import math

import fuzzing
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpviz.core.public import check, published

FUNCTIONS = fuzzing.walk()
TARGETS = fuzzing.targets()
BAD = ("raw", "hang", "oom", "slow", "unnamed")  # not: clear, result, admitted, noinstance


@pytest.fixture(scope="module")
def worker():
    w = fuzzing.Worker()
    w.start()
    yield w
    w.conn.send(None)
    w.stop()


def test_every_public_function_is_checked_and_declares_every_parameter():
    undeclared = {label: published(fn).undeclared if published(fn) else "not wrapped"
                  for label, fn in FUNCTIONS.items()}
    assert len(FUNCTIONS) > 300
    assert {k: v for k, v in undeclared.items() if v} == {}


def _refused(label: str, param: str, value) -> bool:
    """Whether the signature alone refuses ``value`` (the wrapper answers before the body)."""
    spec = published(FUNCTIONS[label])
    try:
        check(spec, (), {param: value}, ValueError)
    except (ValueError, TypeError):
        return True
    return False


def _judge(label: str, param: str, value, outcome) -> str:
    kind, message, _seconds, valid = outcome  # valid: the other arguments are admitted
    if kind == "clear" and valid and not isinstance(value, fuzzing.Resized) and \
            _refused(label, param, value) and param not in message:
        kind, message = "unnamed", f"the message does not name {param}: {message}"
    return "" if kind not in BAD else f"{label}({param}={value!r}): {kind}: {message}"


@pytest.mark.parametrize("label", sorted(TARGETS))
def test_each_parameter_refuses_values_of_the_wrong_kind(label, worker):
    params = TARGETS[label].params
    pairs = [(p, v) for p in params for v in (*fuzzing.WRONG, *fuzzing.RESIZED)]
    outcomes = worker.run(label, pairs)
    problems = [_judge(label, p, v, o) for (p, v), o in zip(pairs, outcomes, strict=True)]
    _valid, _instance, kind, message, _expensive = worker.info[label]
    if kind in BAD and kind != "hang":  # the valid call (longer than 5 s: only refusals run)
        problems.append(f"{label}(valid call): {kind}: {message}")
    assert [p for p in problems if p] == []


WRONG = st.one_of(
    st.sampled_from(fuzzing.WRONG),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.one_of(st.integers(-3, 10**6), st.floats(), st.none()), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@pytest.mark.parametrize("label", sorted(label for label, t in TARGETS.items() if t.params))
@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_wrong_values_get_a_clear_error_or_a_valid_result(label, worker, data):
    param = data.draw(st.sampled_from(TARGETS[label].params), label="parameter")
    value = data.draw(WRONG, label="value")
    problem = _judge(label, param, value, worker.run(label, [(param, value)])[0])
    assert not problem


def test_the_wrong_values_cover_the_issues_categories():
    kinds = {type(v) for v in fuzzing.WRONG}
    assert {int, float, bool, str, tuple, list, dict, type(None)} <= kinds
    assert any(isinstance(v, float) and math.isnan(v) for v in fuzzing.WRONG)
    assert {"yes", "no", "False", "", "bogus"} <= {v for v in fuzzing.WRONG if isinstance(v, str)}


def test_most_functions_get_a_valid_call_to_vary(worker):
    """The harness builds, for most functions, a call the declared kinds admit (a method: on an
    instance a public function made), so that each wrong value is the only one."""
    for label in TARGETS:
        if label not in worker.info:
            worker.run(label, [])
    made = {label: worker.info[label][:2] for label in TARGETS}
    good = [label for label, (valid, instance) in made.items() if valid and instance]
    assert len(good) >= 0.8 * len(made), sorted(set(made) - set(good))
