"""Comparisons for the ``check`` room of every topic: they raise :class:`CheckFailed`, never
``assert`` (which ``python -O`` removes).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import jax
import numpy as np

from tpviz import compat
from tpviz.core.kinds import Any_, Dtype, Numbers, Tree
from tpviz.errors import CheckFailed

__all__ = ["CheckFailed", "close", "finite", "host", "recording", "relative_error",
           "require", "same"]

_recorders: list[list] = []  # what recording() collects: every array host() brought home


def host(x: Numbers, dtype: Dtype = np.float64) -> np.ndarray:
    """``x`` as a NumPy array on this host, whole. A ``jax.Array`` that spans processes (some of
    its shards on another process's devices) is gathered from every process first, so every
    process must call this in the same order; one that is whole here (fully addressable or
    fully replicated) is read locally.
    """
    if isinstance(x, np.ndarray) and x.dtype == dtype:
        return x  # already home (and recorded when it came)
    if (isinstance(x, jax.Array) and not x.is_fully_addressable
            and not x.is_fully_replicated):
        x = compat.gather_to_host(x)
    out = np.asarray(x, dtype)
    for found in _recorders:
        found.append(out)
    return out


@contextmanager
def recording():
    """Collect every array :func:`host` brings home (every value a check compares with its
    reference, and the reference) into the list this yields: ``tpviz.cluster`` compares them
    between a run in one process and one across processes."""
    found: list = []
    _recorders.append(found)
    try:
        yield found
    finally:
        _recorders.remove(found)


def _leaves(tree) -> list[np.ndarray]:
    return [host(leaf) for leaf in jax.tree.leaves(tree)]


def finite(value: Tree, what: str) -> None:
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


def relative_error(a: Tree, b: Tree) -> float:
    """Largest absolute difference, relative to the reference ``b``'s largest value (at least 1).

    Both may be pytrees of arrays with the same structure; the worst leaf counts. A NaN or an
    infinity in either gives ``inf`` (never 0: ``max(0.0, nan)`` would be 0).
    """
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    if len(leaves_a) != len(leaves_b):
        raise CheckFailed(f"{len(leaves_a)} arrays to compare with {len(leaves_b)} references.")
    worst = 0.0
    for x, y in zip(leaves_a, leaves_b, strict=True):
        x, y = host(x), host(y)
        if x.shape != y.shape:
            raise CheckFailed(f"shape {x.shape} differs from the reference's {y.shape}.")
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            return math.inf
        if x.size:
            worst = max(worst, float(np.max(np.abs(x - y)) / max(1.0, float(np.max(np.abs(y))))))
    return worst


def close(got: Tree, want: Tree, what: str, tolerance: float = 1e-4) -> float:
    """Check that ``got`` equals the reference ``want`` within a relative ``tolerance``; return
    the relative error.

    Raises:
        CheckFailed: the shapes differ, a value is NaN or infinite (in ``got`` or in the
            reference), or the error exceeds the tolerance.
    """
    got, want = jax.tree.map(host, got), jax.tree.map(host, want)  # home once (gathered)
    finite(got, what)
    finite(want, f"the reference for {what}")
    error = relative_error(got, want)
    if not error <= tolerance:
        raise CheckFailed(f"{what} differs from the reference: relative error {error:.2e} "
                          f"(tolerance {tolerance:.0e}).")
    return error


def same(got: Any_, want: Any_, what: str) -> None:
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
