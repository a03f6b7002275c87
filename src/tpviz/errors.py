"""Errors a learner can read: what is wrong, the value, and how to fix it.

Every error the library raises is a subclass of :class:`TpvizError` and lives here. Errors about
bad input also subclass ``ValueError`` (or ``TypeError`` for an argument of the wrong kind); a
check that finds a sharded result or a compiled program differing from the plan raises
:class:`CheckFailed`, an ``AssertionError``. In a notebook they render as one short message (no
traceback from deep inside the library or JAX).
"""

from __future__ import annotations

import traceback


class TpvizError(Exception):
    """Base class of the library's errors; renders without a traceback in IPython."""

    def _render_traceback_(self) -> list[str]:  # IPython hook: show the message, not the stack
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class ArgumentError(TpvizError, ValueError):
    """An argument with a value that makes no sense (negative, NaN, not one of the choices)."""


class ShardingError(ArgumentError):
    """A shape, partition spec or mesh that do not fit together."""


class NotationError(ArgumentError):
    """A sharding-notation string such as ``"A[I_XY, J]"`` that cannot be parsed."""


class DeviceSetupError(TpvizError, ValueError, RuntimeError):
    """Devices cannot be set up as asked (too few, too many, or JAX has already started)."""


class CompileError(TpvizError, ValueError):
    """A function that does not compile for the arguments it was given."""


class SolverError(TpvizError, ValueError):
    """An optimisation solver (the ILP of ``tpviz.autoshard``) stopped without a proven
    optimum: a time or iteration limit, or a numerical failure."""


class ScheduleError(ArgumentError):
    """Counts that do not make a pipeline schedule, or an unknown schedule name."""


class ZeroError(ArgumentError):
    """A ZeRO stage outside 0-3 or a non-positive size."""


class ArgumentTypeError(TpvizError, TypeError):
    """An argument of the wrong kind (a name where a schedule is expected, say)."""


class CheckFailed(TpvizError, AssertionError):
    """A sharded run or a compiled program differs from its reference or from the plan."""


class WorkerError(TpvizError, ValueError, RuntimeError):
    """A worker process (``tpviz.core.launch.launch``) raised or died."""


class WorkerTimeout(WorkerError, TimeoutError):
    """Worker processes that did not finish in time (often a deadlock in a collective)."""


class MarkerError(TpvizError, ValueError):
    """The exercise markers of a chapter are inconsistent (the message names the cell)."""


class GradingError(TpvizError, ValueError):
    """Generating student copies or grading would lose work (write into the chapters' folder,
    overwrite a changed file) or cannot start (stale nbgrader metadata, no submissions)."""


def describe(e: BaseException) -> str:
    """An exception in one line: ``Type: first line of its message``; for one without a
    message (a bare ``assert``), the line of code that raised it."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if not first:
        frames = traceback.extract_tb(e.__traceback__)
        if frames:
            last = frames[-1]
            first = f"(no message) at line {last.lineno}: {(last.line or '').strip()}"
    return f"{type(e).__name__}: {first}" if first else type(e).__name__
