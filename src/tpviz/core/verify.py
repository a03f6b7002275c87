"""Comparisons for the ``check`` room of every topic: they raise :class:`CheckFailed`, never
``assert`` (which ``python -O`` removes).
"""

from __future__ import annotations

import jax
import numpy as np

from tpviz.errors import CheckFailed

__all__ = ["CheckFailed", "close", "relative_error", "require", "same"]


def relative_error(a, b) -> float:
    """Largest absolute difference, relative to the reference ``b``'s largest value (at least 1).

    Both may be pytrees of arrays with the same structure; the worst leaf counts.
    """
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    if len(leaves_a) != len(leaves_b):
        raise CheckFailed(f"{len(leaves_a)} arrays to compare with {len(leaves_b)} references.")
    worst = 0.0
    for x, y in zip(leaves_a, leaves_b, strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape:
            raise CheckFailed(f"shape {x.shape} differs from the reference's {y.shape}.")
        if x.size:
            worst = max(worst, float(np.max(np.abs(x - y)) / max(1.0, float(np.max(np.abs(y))))))
    return worst


def close(got, want, what: str, tolerance: float = 1e-4) -> float:
    """Check that ``got`` equals the reference ``want`` within a relative ``tolerance``; return
    the relative error.

    Raises:
        CheckFailed: the shapes differ or the error exceeds the tolerance (NaN included).
    """
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
