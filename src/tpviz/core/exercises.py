"""The checker framework: ✓ or ✗ with a hint, never a raw traceback.

A checker is a function decorated with :func:`checker`. Its body compares the learner's answer
with the expected one and raises :class:`Wrong` with a specific message when it differs. The
decorator turns that into a one-line ✗ message (the cell fails, so a wrong answer fails under
the tests), treats ``...`` or a function that raises ``NotImplementedError`` as "not attempted
yet", and reports any exception raised by the learner's code in plain words. While nbgrader
grades a submission (environment variable ``TPVIZ_GRADING`` set), a stub answer fails instead, so
an exercise not attempted scores 0 rather than nbgrader's full marks for a test that passes.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import numbers
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np

from tpviz.core import verify
from tpviz.errors import describe

NOT_ATTEMPTED = "not attempted yet"
GRADING_ENV = "TPVIZ_GRADING"  # set (by tpviz.grading) while nbgrader grades: a stub fails
TIME_LIMIT_S = 15  # a learner's function runs at most this long inside a checker (a guard
# against endless loops: the slowest right answer, a shard_map compile, takes 1-3 s)
OUTPUT_LIMIT = 2000  # characters of the learner's printed output shown by a checker


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


class _TimeUp(BaseException):  # not an Exception: the learner's code cannot catch it by accident
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` with :class:`_TimeUp` (a SIGALRM timer: Jupyter,
    Colab and pytest run cells in the main thread of a Unix process; elsewhere no limit)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expire(*_):
        raise _TimeUp

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def capped_output(limit: int = OUTPUT_LIMIT) -> Iterator[None]:
    """Collect what the block prints, then show at most ``limit`` characters of it."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            yield
    finally:
        text = buffer.getvalue()
        if text:
            cut = len(text) - limit
            sys.stdout.write(text[:limit] + (f"\n… ({cut:,} more characters of your output "
                                             "not shown)\n" if cut > 0 else ""))


def call(fn: Callable, *args, what: str = "your function"):
    """Call the learner's ``fn`` once, under a time limit and with its printing capped; turn its
    exceptions into a :class:`Wrong` message."""
    if is_stub(fn):
        raise NotAttempted
    if not callable(fn):
        raise Wrong(f"{what} should be a function, but it is a {type(fn).__name__}.",
                    "Pass the function itself (its name without parentheses).")
    try:
        with capped_output(), time_limit(TIME_LIMIT_S):
            return fn(*args)
    except _TimeUp:
        raise Wrong(f"{what} ran for more than {TIME_LIMIT_S} s and was stopped.",
                    "Look for a loop that never ends, or use smaller arrays.") from None
    except NotImplementedError:
        raise NotAttempted from None
    except Exception as e:
        raise Wrong(f"{what} raised {describe(e)}",
                    "Run it on its own in a new cell to see the full error.") from None


def as_integer(value, what: str = "your answer") -> int:
    """An exact integer from an int, a NumPy or JAX integer scalar; :class:`Wrong` otherwise
    (strings, bools and floats such as 3.9 are not silently rounded)."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and tuple(value.shape) == ():
        value = np.asarray(value).item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise Wrong(f"{what} should be a whole number, but it is {value!r} "
                    f"({type(value).__name__}).")
    return int(value)


def as_number(value, what: str = "your answer") -> float:
    """A float from any real number: int, float, ``Fraction``, NumPy or JAX scalar (or a 0-d
    array); :class:`Wrong` for anything else (a string, a bool, an array of several values)."""
    if is_stub(value):
        raise NotAttempted
    if hasattr(value, "shape") and hasattr(value, "dtype") and tuple(value.shape) == ():
        value = np.asarray(value).item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise Wrong(f"{what} should be a number, but it is {value!r} ({type(value).__name__}).")
    return float(value)


def expect_number(value, expected: float, *, what: str = "your answer", rel: float = 1e-6,
                  hint: str = "") -> None:
    """The answer is a number equal to ``expected`` (within a relative tolerance)."""
    try:
        got = as_number(value, what)
    except Wrong as w:
        raise Wrong(w.message, hint) from None
    if not math.isclose(got, expected, rel_tol=rel, abs_tol=rel):
        raise Wrong(f"{what} is {got:,.6g}, which is not right.", hint)


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
    got = verify.host(value, np.dtype(value.dtype))  # whole, also when split across processes
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
                if os.environ.get(GRADING_ENV):  # nbgrader's autograde: a stub scores 0
                    raise ExerciseFailed(f"✗ {title}: {NOT_ATTEMPTED}.") from None
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
