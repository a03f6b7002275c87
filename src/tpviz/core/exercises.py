"""The checker framework: ✓ or ✗ with a hint, never a raw traceback.

A checker is a function decorated with :func:`checker`. Its body compares the learner's answer
with the expected one and raises :class:`Wrong` with a specific message when it differs. The
decorator turns that into a one-line ✗ message (the cell fails, so a wrong answer fails under
the tests), treats ``...`` or a function that raises ``NotImplementedError`` as "not attempted
yet", and reports any exception raised by the learner's code in plain words. While nbgrader
grades a submission (environment variable ``TPVIZ_GRADING`` set when tpviz is imported: the
submission cannot switch it off by editing ``os.environ``), a stub answer fails instead, so an
exercise not attempted scores 0 rather than nbgrader's full marks for a test that passes.
The answers are made plain values (:mod:`tpviz.core.values`) before the body runs, so no code
the learner wrote (an ``__eq__``, a ``__float__``) runs while an expected value exists.

The whole check runs in a worker thread under :data:`CHECK_TIME_LIMIT_S` (every trace and compile
of the learner's code included; see :mod:`tpviz.core.sandbox`): an endless loop, even one inside
compiled code, a ``sys.exit()`` or an ``__eq__`` that never returns becomes a ✗ message.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
from collections.abc import Callable, Iterator

import numpy as np

from tpviz.core import verify
from tpviz.core.sandbox import StillRunning, TimeUp, run_limited, time_limit
from tpviz.core.values import (  # noqa: F401 (the checkers import them from here)
    NotAttempted,
    Wrong,
    as_bool,
    as_integer,
    as_number,
    expect_bytes,
    expect_number,
    is_stub,
    only_keys,
    plain,
    shown,
)
from tpviz.errors import describe

NOT_ATTEMPTED = "not attempted yet"
#: the mark of a check not attempted yet (✓ and ✗ mark the others): a glyph of the plain text
#: fonts every front end has (DejaVu Sans, Liberation, Arial), not an emoji such as ⏳
PENDING = "○"
GRADING_ENV = "TPVIZ_GRADING"  # set (by tpviz.grading) while nbgrader grades: a stub fails
GRADING = bool(os.environ.get(GRADING_ENV))  # read once, when tpviz is imported
TIME_LIMIT_S = 15  # a learner's function runs at most this long inside a checker (a guard
# against endless loops: the slowest right answer, a shard_map compile, takes 1-3 s)
CHECK_TIME_LIMIT_S = 90  # a whole check (below grading's 120-s cell timeout): the learner's calls,
# traces and compiles, the checker's
OUTPUT_LIMIT = 2000  # characters of the learner's printed output shown by a checker


class ExerciseFailed(AssertionError):
    """What a checker raises for a wrong answer; renders as its message in IPython."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{self}\x1b[0m"]


_TimeUp = TimeUp  # the name earlier versions used


def grading() -> bool:
    """Whether nbgrader is grading: set in the environment when tpviz was imported, or now."""
    return GRADING or bool(os.environ.get(GRADING_ENV))


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
    except TimeUp:
        raise Wrong(f"{what} ran for more than {TIME_LIMIT_S} s and was stopped.",
                    "Look for a loop that never ends, or use smaller arrays.") from None
    except NotImplementedError:
        raise NotAttempted from None
    except SystemExit as e:
        raise Wrong(f"{what} called sys.exit({e.code!r}) (SystemExit).",
                    "A function returns its result; it does not end the program.") from None
    except Exception as e:
        raise Wrong(f"{what} raised {describe(e)}",
                    "Run it on its own in a new cell to see the full error.") from None


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
    if np.issubdtype(got.dtype, np.inexact) and not np.isfinite(got).all():
        raise Wrong(f"{what} contains NaN or infinite values.", hint)
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


def _judge(body: Callable, args, kwargs) -> tuple[str, str]:
    """Run one check: ``("ok", praise)``, ``("stub", "")`` or ``("wrong", message)``. The
    answers are made plain values (:func:`~tpviz.core.values.plain`) before the body runs, so
    before any expected value exists."""
    try:
        if any(is_stub(a) for a in (*args, *kwargs.values())):
            raise NotAttempted
        args = [plain(a) for a in args]
        kwargs = {k: plain(v, f"{k!r}") for k, v in kwargs.items()}
        return "ok", body(*args, **kwargs) or ""
    except NotAttempted:
        return "stub", ""
    except Wrong as w:
        return "wrong", w.message + (f"\n  Hint: {w.hint}" if w.hint else "")
    except (TimeUp, StillRunning):
        raise
    except SystemExit as e:
        return "wrong", (f"your code called sys.exit({e.code!r}) (SystemExit).\n  Hint: a "
                         "function returns its result; it does not end the program.")
    except Exception as e:
        return "wrong", f"your answer could not be checked ({type(e).__name__}: {e})."


ANSWER_LOG_ENV = "TPVIZ_ANSWER_LOG"  # make test: a file where each check writes its answer's kind


def _log_answer_kind(name: str, args: tuple, kwargs: dict) -> None:
    """Append ``{"checker": name, "plain": ...}`` to the file named by ``TPVIZ_ANSWER_LOG``:
    whether the answer is plain data, which the grader judges without running it (make test
    compares this with the route the release gives, :mod:`tpviz.grading.prepare`)."""
    import json

    from tpviz.grading.plain import NotPlain, encode

    try:
        for value in (*args, *kwargs.values()):
            encode(value)
        plain = True
    except NotPlain:
        plain = False
    except Exception:  # an answer that cannot be read: the check itself says so
        return
    with open(os.environ[ANSWER_LOG_ENV], "a") as f:
        f.write(json.dumps({"checker": name, "plain": plain}) + "\n")


def checker(title: str) -> Callable:
    """Decorate a checker body: report ✓, ✗ (raising :class:`ExerciseFailed`) or not attempted.

    The body runs in a worker thread under :data:`CHECK_TIME_LIMIT_S` (see :mod:`~tpviz.core.
    sandbox`), so every call, trace and compile of the learner's code is inside the limit."""

    def wrap(body: Callable) -> Callable:
        @functools.wraps(body)
        def check(*args, **kwargs):
            if os.environ.get(ANSWER_LOG_ENV):
                _log_answer_kind(body.__name__, args, kwargs)
            limit = CHECK_TIME_LIMIT_S
            try:
                status, text = run_limited(_judge, body, args, kwargs, seconds=limit)
            except TimeUp:
                status, text = "wrong", (
                    f"checking your answer took more than {limit} s and was stopped.\n  "
                    "Hint: look for a loop that never ends (in your function or in an "
                    "__eq__ it defines), or use smaller arrays.")
            except StillRunning:
                status, text = "wrong", (
                    f"your code ran for more than {limit} s inside compiled code or a "
                    "blocking call (a jax.lax.while_loop that never ends? a long time.sleep?) "
                    "and cannot be stopped from Python.\n  Hint: check the loop's condition; "
                    "a compiled loop keeps a CPU busy until you restart the kernel.")
            if status == "stub":
                if grading():  # nbgrader's autograde: a stub scores 0
                    raise ExerciseFailed(f"✗ {title}: {NOT_ATTEMPTED}.")
                print(f"{PENDING} {title}: {NOT_ATTEMPTED}. Fill in the cell above, run it, "
                      "then run this cell again.")
                return None
            if status == "wrong":
                raise ExerciseFailed(f"✗ {title}: {text}")
            print(f"✓ {title}: correct!" + (f" {text}" if text else ""))
            return None

        check.title = title
        return check

    return wrap
