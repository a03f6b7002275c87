"""The checker framework: ✓ or ✗ with a hint, never a raw traceback.

A checker is a function decorated with :func:`checker`. Its body compares the learner's answer
with the expected one and raises :class:`Wrong` with a specific message when it differs. The
decorator turns that into a one-line ✗ message (the cell fails, so a wrong answer fails under
the tests), treats ``...`` or a function that raises ``NotImplementedError`` as "not attempted
yet", and reports any exception raised by the learner's code in plain words.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

NOT_ATTEMPTED = "not attempted yet"


class Wrong(Exception):
    """Raised inside a checker: the answer is wrong, with what is wrong and a hint."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint


class NotAttempted(Exception):
    """Raised inside a checker when the learner's answer is still the stub."""


class ExerciseFailed(AssertionError):
    """What a checker raises for a wrong answer; renders as its message in IPython."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{self}\x1b[0m"]


def is_stub(value) -> bool:
    return value is ... or value is NotImplemented


def call(fn: Callable, *args, what: str = "your function"):
    """Call the learner's ``fn``; turn its exceptions into a :class:`Wrong` message."""
    if is_stub(fn):
        raise NotAttempted
    if not callable(fn):
        raise Wrong(f"{what} should be a function, but it is a {type(fn).__name__}.",
                    "Pass the function itself (its name without parentheses).")
    try:
        return fn(*args)
    except NotImplementedError:
        raise NotAttempted from None
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise Wrong(f"{what} raised {type(e).__name__}: {first}",
                    "Run it on its own in a new cell to see the full error.") from None


def expect_number(value, expected: float, *, what: str = "your answer", rel: float = 1e-6,
                  hint: str = "") -> None:
    """The answer is a number equal to ``expected`` (within a relative tolerance)."""
    if is_stub(value):
        raise NotAttempted
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise Wrong(f"{what} should be a number, but it is {value!r}.", hint)
    if not math.isclose(float(value), expected, rel_tol=rel, abs_tol=rel):
        raise Wrong(f"{what} is {value:,}, which is not right.", hint)


def expect_array(value, expected, *, what: str = "your result", rtol: float = 1e-5,
                 atol: float = 1e-5, hint: str = "") -> None:
    """The answer is an array of the expected shape and dtype, without NaN, close to expected."""
    if is_stub(value):
        raise NotAttempted
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise Wrong(f"{what} should be an array, but it is a {type(value).__name__}.", hint)
    expected = np.asarray(expected)
    if tuple(value.shape) != expected.shape:
        raise Wrong(f"{what} has shape {tuple(value.shape)}; expected {expected.shape}.", hint)
    if np.dtype(value.dtype) != expected.dtype:
        raise Wrong(f"{what} has dtype {value.dtype}; expected {expected.dtype}.", hint)
    got = np.asarray(value)
    if np.issubdtype(got.dtype, np.floating) and np.isnan(got).any():
        raise Wrong(f"{what} contains NaN.", hint)
    if not np.allclose(got, expected, rtol=rtol, atol=atol):
        worst = np.unravel_index(np.argmax(np.abs(got - expected)), expected.shape)
        at = tuple(map(int, worst))
        raise Wrong(f"{what} has the right shape but wrong values: at index {at} "
                    f"it is {got[worst]}, expected {expected[worst]}.", hint)


def mesh_1d(devices: int, axis: str):
    """A mesh of the first ``devices`` devices along one axis; too few devices raise
    :class:`tpviz.errors.ShardingError` saying to call ``tpviz.setup_devices``."""
    from tpviz.devices import chosen_devices, make_mesh

    return make_mesh((devices,), (axis,), devices=chosen_devices()[:devices])


def checker(title: str) -> Callable:
    """Decorate a checker body: report ✓, ✗ (raising :class:`ExerciseFailed`) or not attempted."""

    def wrap(body: Callable) -> Callable:
        @functools.wraps(body)
        def check(*args, **kwargs):
            try:
                if any(is_stub(a) for a in (*args, *kwargs.values())):
                    raise NotAttempted
                praise = body(*args, **kwargs)
            except NotAttempted:
                print(f"⏳ {title}: {NOT_ATTEMPTED}. Fill in the cell above, run it, then run "
                      "this cell again.")
                return None
            except Wrong as w:
                message = f"✗ {title}: {w.message}"
                if w.hint:
                    message += f"\n  Hint: {w.hint}"
                raise ExerciseFailed(message) from None
            except Exception as e:
                raise ExerciseFailed(f"✗ {title}: your answer could not be checked "
                                     f"({type(e).__name__}: {e}).") from None
            print(f"✓ {title}: correct!" + (f" {praise}" if praise else ""))
            return None

        check.title = title
        return check

    return wrap
