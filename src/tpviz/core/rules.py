"""The rules behind :mod:`tpviz.core.kinds`: each checks one parameter's value and raises an
error from :mod:`tpviz.errors` that names the argument, the value and what it must be."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np

from tpviz.core import validate as v
from tpviz.errors import ArgumentTypeError

EXACT = 2**53  # the largest integer a float holds exactly: the default bound of a count


class Rule:
    """One parameter's kind: ``check(name, value, error)`` raises or returns; ``result(value)``
    says what is wrong with a returned value of this kind ("" when nothing)."""

    __slots__ = ()
    what = "a value"

    def check(self, name: str, value, error: type[Exception]) -> None:
        """Raise ``error`` (or ``ArgumentTypeError``) naming ``name`` if ``value`` is not one."""

    def result(self, value) -> str:
        return ""

    def __or__(self, other):  # ``AxisOf("mesh") | None``
        if other is None:
            from tpviz.core.compound import Maybe  # combines rules, so it sits above them

            return Maybe(self)
        return NotImplemented


class Int(Rule):
    """An integer within ``[minimum, maximum]``; ``why`` explains the upper bound."""

    __slots__ = ("maximum", "minimum", "why")

    def __init__(self, minimum: int | None = 1, maximum: int | None = EXACT, why: str = ""):
        self.minimum, self.maximum, self.why = minimum, maximum, why

    @property
    def what(self):
        return {1: "a positive integer", 0: "an integer >= 0", None: "an integer"}.get(
            self.minimum, f"an integer >= {self.minimum}")

    def check(self, name, value, error):
        plain = v.integer(name, value, minimum=self.minimum, error=error)
        if self.maximum is not None and plain > self.maximum:
            why = self.why or "beyond it float arithmetic on it is no longer exact"
            raise error(f"{name} = {plain:,} is more than the bound of {self.maximum:,} ({why}); "
                        f"give a smaller value.")

    def result(self, value):  # a count, size or index returned: never NaN nor below 0
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return ""
        if math.isnan(value):
            return "NaN"
        if self.minimum is not None and value < min(self.minimum, 0):
            return f"{value:g}, below 0"
        return ""


class Real(Rule):
    """A real number, finite unless ``infinite``, ``> 0`` if ``positive``, within bounds."""

    __slots__ = ("infinite", "maximum", "minimum", "positive")

    def __init__(self, minimum: float | None = 0.0, maximum: float | None = None,
                 positive: bool = False, infinite: bool = False):
        self.minimum, self.maximum = minimum, maximum
        self.positive, self.infinite = positive, infinite

    @property
    def what(self):
        return ("a number > 0" if self.positive else "a number >= 0" if self.minimum == 0
                else "a number")

    def check(self, name, value, error):
        plain = v._scalar(value)
        if isinstance(plain, bool) or not isinstance(plain, numbers.Real):
            raise ArgumentTypeError(f"{name} must be a number, got {v._short(value)} "
                                    f"({type(value).__name__}).")
        try:
            plain = float(plain)
        except OverflowError:
            raise error(f"{name} = {v._short(value)} is too large for a float.") from None
        if math.isnan(plain) or (math.isinf(plain) and not self.infinite):
            raise error(f"{name} must be a finite number, got {plain}.")
        if self.positive and plain <= 0:
            raise error(f"{name} must be positive (> 0), got {plain:g}.")
        if self.minimum is not None and plain < self.minimum:
            raise error(f"{name} must be at least {self.minimum:g}, got {plain:g}.")
        if self.maximum is not None and plain > self.maximum:
            raise error(f"{name} must be at most {self.maximum:g}, got {plain:g}.")

    def result(self, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return ""
        if math.isnan(value):
            return "NaN"
        if self.minimum is not None and value < self.minimum:
            return f"{value:g}, below {self.minimum:g}"
        return ""


class FlagRule(Rule):
    __slots__ = ()
    what = "True or False"

    def check(self, name, value, error):
        v.flag(name, value)


class Text(Rule):
    """A string; not empty unless ``empty`` (a name, a title given as "", ...)."""

    __slots__ = ("empty",)
    what = "a string"

    def __init__(self, empty: bool = True):
        self.empty = empty

    def check(self, name, value, error):
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{name} must be a string, got {v._short(value)} "
                                    f"({type(value).__name__}).")
        if not self.empty and not value.strip():
            raise error(f"{name} must be a non-empty name, got {value!r}.")


class Choice(Rule):
    """One of ``options`` (a collection, or a function returning one: read at call time)."""

    __slots__ = ("options",)
    what = "one of the names"

    def __init__(self, options):
        self.options = options

    def check(self, name, value, error):
        options = self.options() if callable(self.options) else self.options
        try:
            floats = isinstance(value, float) and not any(isinstance(o, float) for o in options)
            if value in options and not isinstance(value, bool) and not floats:
                return
        except TypeError:  # unhashable
            pass
        if isinstance(value, float) and value in options:  # 2.0 for the option 2
            raise ArgumentTypeError(f"{name} must be one of {_listed(options)}, got the float "
                                    f"{value!r}; give the integer.")
        v.choice(name, value, list(dict.fromkeys(options)), error=error)


def _listed(options) -> str:
    return ", ".join(repr(o) for o in dict.fromkeys(options))


_NAMES = {"P": "PartitionSpec (e.g. P('X', None))"}  # classes known by another name


class Instance(Rule):
    """An instance of ``cls`` (a class or a tuple of them)."""

    __slots__ = ("cls",)

    def __init__(self, cls):
        self.cls = cls

    @property
    def what(self):
        classes = self.cls if isinstance(self.cls, tuple) else (self.cls,)
        return " or ".join(f"a {_NAMES.get(c.__name__, c.__name__)}" for c in classes)

    def check(self, name, value, error):
        if not isinstance(value, self.cls):
            raise ArgumentTypeError(f"{name} must be {self.what}, got {type(value).__name__} "
                                    f"{v._short(value)}.")


class Array(Rule):
    """An array (or nested sequence) of real numbers: ``ndim`` dimensions if given, or the named
    dimensions ``dims`` (``"B S H"``; ``"... H"``: any leading ones), which must agree across
    the function's arrays; all finite if ``finite`` (on concrete values only, never on a traced
    one); integers if ``integer``."""

    __slots__ = ("dims", "finite", "floating", "integer", "loose", "ndim")

    def __init__(self, ndim: int | None = None, finite: bool = False, integer: bool = False,
                 dims: str | None = None, floating: bool = False, loose: bool = False):
        self.ndim, self.finite, self.integer, self.floating = ndim, finite, integer, floating
        self.loose = loose  # lists and tuples of numbers too, where the body converts them
        self.dims = tuple(dims.split()) if dims else None

    what = "an array of numbers"

    def check(self, name, value, error):
        if isinstance(value, str | bytes | Mapping) or value is None or callable(value):
            raise ArgumentTypeError(f"{name} must be an array of numbers, got "
                                    f"{type(value).__name__} {v._short(value)}.")
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if dtype is None and (self.dims or self.ndim is not None) and not self.loose:
            raise ArgumentTypeError(f"{name} must be a NumPy or JAX array, got "
                                    f"{type(value).__name__} {v._short(value)}; wrap it in "
                                    f"np.asarray(...).")
        if dtype is None:
            try:
                value = np.asarray(value)
            except (ValueError, TypeError) as e:
                raise ArgumentTypeError(f"{name} must be an array of numbers (a ragged or mixed "
                                        f"sequence is not): {e}") from None
            shape, dtype = value.shape, value.dtype
        kind = np.dtype(dtype).kind if not hasattr(dtype, "name") or dtype.name != "key" else ""
        if kind not in "biuf" or (self.integer and kind not in "biu") or (
                self.floating and kind != "f"):
            want = "integers" if self.integer else "floats" if self.floating else "numbers"
            raise ArgumentTypeError(f"{name} must be an array of {want}, got dtype {dtype}.")
        if self.ndim is not None and len(shape) != self.ndim:
            raise error(f"{name} must be a {self.ndim}-D array, got shape {tuple(shape)}.")
        if self.dims is not None:
            fixed = [d for d in self.dims if d != "..."]
            if len(shape) < len(fixed) or ("..." not in self.dims and len(shape) > len(fixed)) \
                    or any(int(d) != n for d, n in zip(reversed(fixed), reversed(shape),
                                                          strict=False) if d.isdigit()):
                raise error(f"{name} must be an array [{', '.join(self.dims)}], got shape "
                            f"{tuple(shape)}.")
        if 0 in tuple(shape):
            raise error(f"{name} is empty (shape {tuple(shape)}); give at least one value.")
        if self.finite and kind == "f":
            try:
                bad = int(np.size(value) - np.count_nonzero(np.isfinite(np.asarray(value))))
            except Exception:  # a traced value: unknown while tracing
                return
            if bad:
                raise error(f"{name} holds {bad} NaN or infinite value(s) of {np.size(value)}; "
                            f"give finite numbers.")

    def named_shapes(self, name: str, value) -> list[tuple[str, tuple, tuple]]:
        return [(name, self.dims, tuple(np.shape(value)))] if self.dims else []

