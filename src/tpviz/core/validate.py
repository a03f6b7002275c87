"""Argument validation shared by every public function: one message style everywhere.

Each helper takes the argument's name and value and returns the value in a plain Python type, or
raises an error whose message names the argument, the value and the fix. Numbers may be Python,
NumPy or JAX scalars (or 0-d arrays); ``bool`` is never a number.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable

import numpy as np

from tpviz.errors import ArgumentError, ArgumentTypeError


def _scalar(value):
    """A Python scalar from a NumPy/JAX scalar or 0-d array; other values unchanged."""
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "shape") and hasattr(value, "dtype") and tuple(value.shape) == ():
        return np.asarray(value).item()
    return value


def integer(name: str, value, *, minimum: int | None = 1, maximum: int | None = None,
            fix: str = "", error: type[Exception] = ArgumentError) -> int:
    """``value`` as an ``int`` within ``[minimum, maximum]``.

    Raises:
        ArgumentTypeError: not an integer (a float such as 8.0, a string or a bool included).
        ArgumentError (or ``error``): outside the bounds.
    """
    plain = _scalar(value)
    if isinstance(plain, bool) or not isinstance(plain, numbers.Integral):
        raise ArgumentTypeError(f"{name} must be an integer, got {value!r} "
                                f"({type(value).__name__}).{' ' + fix if fix else ''}")
    plain = int(plain)
    if minimum is not None and plain < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
        raise error(f"{name} must be {what}, got {plain}.{' ' + fix if fix else ''}")
    if maximum is not None and plain > maximum:
        raise error(f"{name} = {plain:,} is more than this can handle (at most "
                            f"{maximum:,}).{' ' + fix if fix else ''}")
    return plain


def number(name: str, value, *, positive: bool = False, minimum: float | None = None,
           fix: str = "", error: type[Exception] = ArgumentError) -> float:
    """``value`` as a finite ``float``: positive (> 0) if asked, at least ``minimum`` if given.

    Raises:
        ArgumentTypeError: not a real number (a string or a bool included).
        ArgumentError: NaN, infinite, not positive, or below the minimum.
    """
    plain = _scalar(value)
    if isinstance(plain, bool) or not isinstance(plain, numbers.Real):
        raise ArgumentTypeError(f"{name} must be a number, got {value!r} "
                                f"({type(value).__name__}).{' ' + fix if fix else ''}")
    plain = float(plain)
    if not math.isfinite(plain):
        raise error(f"{name} must be a finite number, got {plain}.")
    if positive and plain <= 0:
        raise error(f"{name} must be positive, got {plain:g}.{' ' + fix if fix else ''}")
    if minimum is not None and plain < minimum:
        raise error(f"{name} must be at least {minimum:g}, got {plain:g}."
                            f"{' ' + fix if fix else ''}")
    return plain


def flag(name: str, value) -> bool:
    """``value`` as a ``bool``: only ``True``/``False`` (or NumPy's), never 0, 1 or a string.

    Raises:
        ArgumentTypeError: anything else.
    """
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise ArgumentTypeError(f"{name} must be True or False, got {value!r} "
                            f"({type(value).__name__}).")


def choice(name: str, value, options: Iterable, error: type[Exception] = ArgumentError):
    """``value`` if it is one of ``options``; else an error with a "did you mean" hint.

    Raises:
        ArgumentError: not one of the options.
    """
    options = list(options)
    plain = _scalar(value)
    if plain in options and not isinstance(plain, bool):
        return plain
    shown = ", ".join(map(repr, options))
    hint = ""
    if isinstance(plain, str):
        lowered = {str(o).lower(): o for o in options}
        close = ([lowered[plain.lower()]] if plain.lower() in lowered else
                 difflib.get_close_matches(plain, [str(o) for o in options], n=1))
        if close:
            hint = f" Did you mean {close[0]!r}?"
    raise error(f"{name} = {value!r} is not one of the choices: {shown}.{hint}")


def keyed(name: str, value, keys: tuple[str, ...]) -> dict[str, float]:
    """``value`` as {key: a number > 0} for every one of ``keys`` (others ignored).

    Raises:
        ArgumentTypeError: not a dict. ArgumentError: a key missing, or a bad number.
    """
    instance(name, value, dict, f"a dict of numbers keyed {', '.join(keys)}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise ArgumentError(f"{name} = {_short(value)} has no value for "
                            f"{', '.join(map(repr, missing))}; give one for each of "
                            f"{', '.join(map(repr, keys))}.")
    return {k: number(f"{name}[{k!r}]", value[k], positive=True) for k in keys}


def instance(name: str, value, expected: type | tuple[type, ...], what: str, fix: str = ""):
    """``value`` if it is an instance of ``expected`` (described as ``what``).

    Raises:
        ArgumentTypeError: it is not, with ``fix`` (how to make the right kind of object).
    """
    if not isinstance(value, expected):
        raise ArgumentTypeError(f"{name} must be {what}, got {type(value).__name__} "
                                f"{_short(value)}.{' ' + fix if fix else ''}")
    return value


def mesh_shape(name: str, value) -> dict[str, int]:
    """A mesh shape ``{axis: size}`` from a mapping or a ``jax.sharding.Mesh``.

    Raises:
        ArgumentTypeError: neither a mapping nor a mesh.
        ArgumentError: an axis size that is not a positive integer.
    """
    if hasattr(value, "axis_names") and hasattr(value, "devices") and hasattr(value, "shape"):
        value = dict(value.shape)
    if not hasattr(value, "items"):
        raise ArgumentTypeError(
            f"{name} must be a mesh shape such as {{'X': 2, 'Y': 4}} (or a jax Mesh), got "
            f"{type(value).__name__} {_short(value)}.")
    return {str(axis): integer(f"{name}[{axis!r}]", size) for axis, size in value.items()}


def bounded(what: str, amount: float, limit: float, fix: str,
            error: type[Exception] = ArgumentError) -> None:
    """Refuse work or memory beyond ``limit``: a size guard that answers at once, with an error
    naming the size (``what`` = ``amount``), the limit and the fix.

    Raises:
        ArgumentError (or ``error``): ``amount > limit``.
    """
    if amount > limit:
        raise error(f"{what} = {amount:,.0f} is more than the limit of {limit:,.0f}, which "
                    f"keeps this to a few seconds and a few hundred MB. {fix}")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
