"""Errors a learner can read: what is wrong, the value, and how to fix it.

Every error the library raises on bad input is a subclass of :class:`TpvizError`. In a notebook
they render as one short message (no traceback from deep inside the library or JAX).
"""

from __future__ import annotations


class TpvizError(Exception):
    """Base class of the library's errors; renders without a traceback in IPython."""

    def _render_traceback_(self) -> list[str]:  # IPython hook: show the message, not the stack
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class ShardingError(TpvizError, ValueError):
    """A shape, partition spec or mesh that do not fit together."""


class NotationError(TpvizError, ValueError):
    """A sharding-notation string such as ``"A[I_XY, J]"`` that cannot be parsed."""


class DeviceSetupError(TpvizError, RuntimeError):
    """Devices cannot be set up as asked (too few, or JAX has already started)."""


class CompileError(TpvizError, ValueError):
    """A function that does not compile for the arguments it was given."""
