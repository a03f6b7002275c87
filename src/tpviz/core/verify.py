"""Comparisons for the ``check`` room of every topic: they raise :class:`CheckFailed`, never
``assert`` (which ``python -O`` removes).
"""

from __future__ import annotations

import math

import jax
import numpy as np

from tpviz.errors import CheckFailed

__all__ = ["CheckFailed", "close", "finite", "relative_error", "require", "same"]


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(tree)]


def finite(value, what: str) -> None:
    """Check that every number in ``value`` (an array, a number or a pytree of them) is finite.

    Raises:
        CheckFailed: a NaN or an infinity, with how many and where the first one is.
    """
    for leaf in _leaves(value):
        bad = ~np.isfinite(leaf)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            kind = "NaN" if np.isnan(leaf[first]) else "an infinity"
            raise CheckFailed(f"{what} is not finite: {int(bad.sum())} of {leaf.size} values are "
                              f"NaN or infinite (the first, at index {first}, is {kind}). "
                              "Look for a division by zero, a log of 0 or an overflow.")


def relative_error(a, b) -> float:
    """Largest absolute difference, relative to the reference ``b``'s largest value (at least 1).

    Both may be pytrees of arrays with the same structure; the worst leaf counts. A NaN or an
    infinity in either gives ``inf`` (never 0: ``max(0.0, nan)`` would be 0).
    """
    leaves_a, leaves_b = _leaves(a), _leaves(b)
    if len(leaves_a) != len(leaves_b):
        raise CheckFailed(f"{len(leaves_a)} arrays to compare with {len(leaves_b)} references.")
    worst = 0.0
    for x, y in zip(leaves_a, leaves_b, strict=True):
        if x.shape != y.shape:
            raise CheckFailed(f"shape {x.shape} differs from the reference's {y.shape}.")
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            return math.inf
        if x.size:
            worst = max(worst, float(np.max(np.abs(x - y)) / max(1.0, float(np.max(np.abs(y))))))
    return worst


def close(got, want, what: str, tolerance: float = 1e-4) -> float:
    """Check that ``got`` equals the reference ``want`` within a relative ``tolerance``; return
    the relative error.

    Raises:
        CheckFailed: the shapes differ, a value is NaN or infinite (in ``got`` or in the
            reference), or the error exceeds the tolerance.
    """
    finite(got, what)
    finite(want, f"the reference for {what}")
    error = relative_error(got, want)
    if not error <= tolerance:
        raise CheckFailed(f"{what} differs from the reference: relative error {error:.2e} "
                          f"(tolerance {tolerance:.0e}).")
    return error


def same(got, want, what: str) -> None:
    """Check that ``got == want`` exactly (counts, bytes, shapes, lists of collectives).

    Raises:
        CheckFailed: they differ; the message shows both.
    """
    if got != want:
        raise CheckFailed(f"{what}: found {got!r}, the plan says {want!r}.")


def require(condition: bool, message: str) -> None:
    """Raise :class:`CheckFailed` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(message)
