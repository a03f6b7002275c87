"""A learner's answer as a plain value, read before the expected value exists.

A checker must never call code the learner wrote while it holds the expected value: a number
whose ``__float__`` reads ``expected`` from the checker's frame, or a ``str`` whose ``__eq__`` is
always true, would otherwise pass. So :func:`plain` turns an answer into built-in values of their
exact types (``int``, ``float``, ``bool``, ``str``, ``None``, ``list``, ``tuple``, ``dict``,
``set``, ``Fraction``, ``complex``, NumPy arrays and scalars) as the checker is entered, reading a
subclass of a built-in through the built-in's own methods (its overrides never run). Library
objects (a ``jax.Array``, a ``PartitionSpec``, a mesh) and functions pass unchanged; any other
object is refused with :class:`Wrong`. The conversions below (``as_number`` and the rest) accept
exact types only and never call a method the learner could have defined.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Iterable
from fractions import Fraction

import numpy as np

MAX_ITEMS = 1_000_000  # elements of containers one answer may hold
MAX_DEPTH = 40
_NUMPY_SCALARS = frozenset(t for t in np.sctypeDict.values()
                           if issubclass(t, np.generic) and t.__module__ == "numpy")


class Wrong(Exception):
    """Raised inside a checker: the answer is wrong, with what is wrong and a hint."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint


class NotAttempted(Exception):
    """Raised inside a checker when the learner's answer is still the stub."""


def is_stub(value) -> bool:
    return value is ... or value is NotImplemented


def _trusted_roots() -> tuple[str, ...]:
    import os

    import tpviz

    roots = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(tpviz.__file__))}
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


def _library_type(cls: type) -> bool:
    """Whether ``cls`` is an installed library's class: found under its own name in a module
    whose file is part of this Python's installation or of tpviz (a class defined in a notebook
    cell, or in a module the learner wrote, is not; nor one that only claims a library's
    ``__module__``)."""
    import os

    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    if module is None or not isinstance(file, str):
        return False
    if not os.path.realpath(file).startswith(_trusted_roots()):
        return False
    found = module
    for part in str(getattr(cls, "__qualname__", "")).split("."):
        found = getattr(found, part, None)
    return found is cls


def _jax_array_type():
    if "jax" not in sys.modules:
        return None
    return type(importlib.import_module("jax.numpy").zeros(()))


class _Budget:
    def __init__(self):
        self.left = MAX_ITEMS

    def take(self, n: int, what: str) -> None:
        self.left -= n
        if self.left < 0:
            raise Wrong(f"{what} holds more than {MAX_ITEMS:,} values; no answer here is that "
                        "large.")


def plain(value, what: str = "your answer", *, _depth: int = 0, _budget: _Budget | None = None):
    """``value`` as plain built-in values of exact types (see the module's docstring).

    Raises:
        Wrong: an object the checker cannot read as a value (a class defined in the notebook,
            not a function), or an answer nested too deep or too large.
    """
    budget = _budget or _Budget()
    if _depth > MAX_DEPTH:
        raise Wrong(f"{what} is nested more than {MAX_DEPTH} levels deep.")
    t = type(value)
    if value is None or t in (bool, int, float, str, complex, Fraction) or is_stub(value):
        return value
    if t in _NUMPY_SCALARS:
        return value
    if t is np.ndarray:
        if value.dtype.hasobject:
            raise Wrong(f"{what} is a NumPy array of Python objects; give numbers.")
        budget.take(value.size, what)
        return value

    def each(items):
        items = list(items)
        budget.take(len(items), what)
        return [plain(v, what, _depth=_depth + 1, _budget=budget) for v in items]

    if t in (list, tuple, set, frozenset):
        return t(each(value))
    if t is dict:
        return dict(zip(each(value.keys()), each(value.values()), strict=True))
    if _library_type(t) or t is _jax_array_type():
        return value  # a library object (a jax.Array, a PartitionSpec): passed as it is
    for base in (bool, int, float, str, complex):  # a subclass: its built-in value
        if issubclass(t, base):
            return getattr(base, f"__{base.__name__}__")(value)
    if issubclass(t, np.ndarray):
        return plain(np.array(value, copy=True, subok=False), what, _depth=_depth,
                     _budget=budget)
    for base in (list, tuple, set, frozenset):
        if issubclass(t, base):
            return base(each(base.__iter__(value)))
    if issubclass(t, dict):
        pairs = list(dict.items(value))
        return dict(zip(each(k for k, _ in pairs), each(v for _, v in pairs), strict=True))
    if callable(value):
        return value  # a function answer: the checker calls it
    raise Wrong(f"{what} is a {t.__name__}, an object defined in the notebook, not a value "
                "the checker can read.", "Give a number, a string, a list, a dict or an array.")


def _scalar(value):
    """The Python number inside a NumPy scalar or a 0-d NumPy or JAX array (exact types only)."""
    t = type(value)
    if t in _NUMPY_SCALARS:
        return value.item()
    if (t is np.ndarray or t is _jax_array_type()) and value.shape == ():
        return np.asarray(value).item()
    return value


def as_integer(value, what: str = "your answer") -> int:
    """An exact integer from an int, a NumPy or JAX integer scalar or a whole ``Fraction``;
    :class:`Wrong` otherwise (strings, bools and floats such as 3.9 are not silently rounded)."""
    if is_stub(value):
        raise NotAttempted
    value = _scalar(plain(value, what))
    if type(value) is Fraction and value.denominator == 1:
        value = value.numerator
    if type(value) is not int:
        raise Wrong(f"{what} should be a whole number, but it is {value!r} "
                    f"({type(value).__name__}).")
    return value


def as_number(value, what: str = "your answer") -> float:
    """A float from a real number: int, float, ``Fraction``, NumPy or JAX scalar (or a 0-d
    array); :class:`Wrong` for anything else (a string, a bool, an array of several values)."""
    if is_stub(value):
        raise NotAttempted
    value = _scalar(plain(value, what))
    if type(value) not in (int, float, Fraction):
        raise Wrong(f"{what} should be a number, but it is {value!r} ({type(value).__name__}).")
    try:
        number = float(value)  # an exact int, float or Fraction: no learner's code runs
    except OverflowError:  # a Fraction or an int too large for a float
        raise Wrong(f"{what} is too large to be right ({type(value).__name__}).") from None
    if not math.isfinite(number):
        raise Wrong(f"{what} is {number}, not a finite number.",
                    "Look for a division by zero or an overflow.")
    return number


def as_bool(value, what: str = "your answer") -> bool:
    """A ``bool`` from ``True``/``False`` or a NumPy/JAX boolean scalar; :class:`Wrong` for
    anything else (``1``, ``"yes"``)."""
    if is_stub(value):
        raise NotAttempted
    value = _scalar(plain(value, what))
    if type(value) is not bool:
        raise Wrong(f"{what} should be True or False, but it is {value!r} "
                    f"({type(value).__name__}).")
    return value


def only_keys(answer, allowed: Iterable[str], what: str = "your answer",
              required: Iterable[str] | None = None) -> dict:
    """The answer as a plain ``dict`` with no key outside ``allowed`` (and every key of
    ``required``, default none); :class:`Wrong` naming an unknown or missing key otherwise."""
    if is_stub(answer):
        raise NotAttempted
    answer = plain(answer, what)
    if type(answer) is not dict:
        raise Wrong(f"{what} should be a dict, but it is a {type(answer).__name__}.")
    allowed = list(allowed)
    extra = [k for k in answer if k not in allowed]
    if extra:
        raise Wrong(f"{what} has key {extra[0]!r}, which this exercise does not use.",
                    f"Use only the keys {', '.join(map(repr, allowed))}.")
    missing = [k for k in (required or []) if k not in answer]
    if missing:
        raise Wrong(f"{what} has no key {missing[0]!r}.",
                    f"Give every one of {', '.join(map(repr, required))}.")
    return answer


def shown(value: float) -> str:
    """A number as a message shows it: a whole number without ".0" and with thousands
    separators (4,194,304, however it was computed), others to 6 significant digits."""
    x = float(value)
    if x.is_integer() and abs(x) < 1e18:
        return f"{int(x):,}"
    return f"{x:,.2f}" if 1e5 <= abs(x) < 1e18 else f"{x:,.6g}"


def expect_number(value, expected: float, *, what: str = "your answer", rel: float = 1e-6,
                  hint: str = "") -> None:
    """The answer is a number equal to ``expected`` within a relative tolerance ``rel`` (an
    absolute one, ``rel``, only when ``expected`` is 0: an absolute slack of ``rel`` would let
    a small answer, 0.05 ms say, be 20 % off)."""
    try:
        got = as_number(value, what)
    except Wrong as w:
        raise Wrong(w.message, hint) from None
    if not math.isclose(got, expected, rel_tol=rel, abs_tol=0.0 if expected else rel):
        raise Wrong(f"{what} is {shown(got)}, which is not right.", hint)


def expect_bytes(value, expected: float, *, what: str = "your answer", hint: str = "") -> None:
    """The answer is a count of bytes (or of anything whole) equal to ``expected`` exactly: a
    whole number, as an int or a float from a division (``7 / 8 * 2**20``); a float's rounding
    (a few units in its last place) is forgiven, one byte more or less is not."""
    try:
        got = as_number(value, what)
    except Wrong as w:
        raise Wrong(w.message, hint) from None
    expected = float(expected)
    slack = max(1e-6, 8 * math.ulp(expected)) if expected.is_integer() else 1e-9 * abs(expected)
    if abs(got - expected) > slack:
        raise Wrong(f"{what} is {shown(got)}, which is not right.", hint)
