"""What a public function's parameters are, declared in its signature: the kinds that
:func:`tpviz.core.public.public` reads and checks on every call from outside the library.

A parameter annotated ``int``, ``float``, ``bool`` or ``str`` is already declared:

- ``int``: an integer (NumPy's too; never a bool or a float such as 8.0), at least 1 (a count)
  unless its default is smaller (a default of 0 admits 0; a negative default, any integer), and at
  most 2**53 (beyond it float arithmetic on the value is no longer exact);
- ``float``: a real number (an integer too), not NaN or infinite (unless the default is), at
  least 0 unless the default is negative;
- ``bool``: ``True`` or ``False`` only (never 1, ``"yes"`` or ``"False"``); ``str``: a string.

A default is always admissible; ``X | None`` admits None. Anything more is said with
``typing.Annotated`` and the kinds below, e.g. ``stages: Size(4096, "each op of a schedule is a
Python object")``, ``name: OneOf(NAMES)``, ``t_f: Time``, ``axis: AxisOf("mesh")``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated

from tpviz.core.compound import Either, Seq
from tpviz.core.lookups import (
    Anything,
    AxesRule,
    AxisOf,
    ColourRule,
    Function,
    KeyOf,
    Lookup,
    Map,
    MeshRule,
    MeshShapeRule,
)
from tpviz.core.lookups import KeywordsOf as _KeywordsOf
from tpviz.core.lookups import Tree as _Tree
from tpviz.core.rules import EXACT, Array, Choice, FlagRule, Int, Real, Text

# --- the vocabulary used in signatures -------------------------------------------------------

# why a size has its bound (the end of the error's sentence)
HELD = "the arrays built from it are held in memory"
COMPILED = "each is traced into the program, which then takes long to compile"
DRAWN = "each is drawn, and a figure of more is slow and unreadable"

Count = Annotated[int, Int(1)]  # a positive count
Index = Annotated[int, Int(0)]  # an index or a seed: >= 0
Seed = Annotated[int, Int(0, 2**32 - 1, "a random seed is a 32-bit number")]
Devices = Annotated[int, Int(1, 2**20, "more devices than any machine has")]
Time = Annotated[float, Real(0.0)]  # seconds (or a time unit), finite, >= 0
Amount = Annotated[float, Real(0.0)]  # bytes, FLOPs, parameters: finite, >= 0
Rate = Annotated[float, Real(0.0, positive=True)]  # FLOP/s, bytes/s: finite, > 0
Bandwidth = Annotated[float, Real(0.0, positive=True, infinite=True)]  # > 0, inf: free
Bytes = Annotated[float, Real(0.0, infinite=True)]  # >= 0, inf: no limit
Positive = Rate
Share = Annotated[float, Real(0.0, 1.0)]  # a fraction in [0, 1]
Signed = Annotated[float, Real(None)]  # any finite number
Flag = Annotated[bool, FlagRule()]
MeshShape = Annotated[Mapping, MeshShapeRule()]
JaxMesh = Annotated[object, MeshRule()]
Numbers = Annotated[object, Array()]
Finite = Annotated[object, Array(finite=True)]
Floats = Annotated[object, Array(floating=True)]  # an array of floats (gradients flow)
Any_ = Annotated[object, Anything()]
Dtype = Annotated[object, Lookup("dtype")]
SystemLike = Annotated[object, Lookup("system")]
SpecLike = Annotated[object, Lookup("spec")]
Axes = Annotated[object, AxesRule()]  # annotate ``ax: Axes | None = None``
Name = Annotated[str, Text()]
Colour = Annotated[object, ColourRule()]
Items = Annotated[tuple, Seq(None, 0)]  # a list or tuple, maybe empty
Indices = Annotated[tuple, Seq(Int(0), 0)]  # 0-based axis or device indices
Inches = Annotated[float, Real(0.0, 100.0, positive=True)]  # a figure's size
Callback = Annotated[Callable, Function()]
Tree = Annotated[object, _Tree()]  # numbers, arrays, or lists and dicts of them


def MeshWith(*axes: str):
    """A jax Mesh with (at least) these axis names."""
    return Annotated[object, MeshRule(axes)]


def Size(maximum: int, why: str, minimum: int = 1):
    """An integer in ``[minimum, maximum]``; the error says the bound and ``why``."""
    return Annotated[int, Int(minimum, maximum, why)]


def OneOf(options):
    """A name from ``options`` (a collection, or a function returning one)."""
    return Annotated[str, Choice(options)]


def Sizes(maximum: int | None = EXACT, why: str = "", *, minimum: int = 1,
          length: int | None = None, least: int = 0):
    """A shape: a tuple of integers in ``[minimum, maximum]``, of ``length`` if given (else of at
    least ``least`` items)."""
    return Annotated[tuple, Seq(Int(minimum, maximum, why), length or least, length)]


def ArrayOf(ndim: int | str | None = None, *, finite: bool = False, integer: bool = False,
            loose: bool = False):
    """An array of numbers: ``ndim`` dimensions, or named ones (``"B S H"``, ``"... H"``: the
    same name means the same size across the function's arrays); finite, integers, if asked."""
    if isinstance(ndim, str):
        return Annotated[object, Array(None, finite, integer, ndim, loose=loose)]
    return Annotated[object, Array(ndim, finite, integer, loose=loose)]


def Keys(*required: str, closed: bool = False, dims: dict | None = None):
    """A dict of arrays holding (at least, or if ``closed`` exactly) the keys ``required``; the
    arrays of ``dims``' keys have those named dimensions (``{"w1": "H F"}``)."""
    return Annotated[Mapping, Map(value=Array(), required=required, closed=closed, dims=dims)]


def KeywordsOf(fn):
    """``**kwargs`` passed on to ``fn``: each must be one of its keyword arguments."""
    return Annotated[object, _KeywordsOf(fn)]


def Of(*kinds):
    """A value of any of ``kinds`` (classes or kinds)."""
    return Annotated[object, Either(*[rule_of(k) for k in kinds])]


def rule_of(kind):
    """The rule an explicit kind stands for (used by :func:`Of`)."""
    from tpviz.core.public import rule_for

    rule = rule_for(kind, None)
    if rule is None:
        raise TypeError(f"{kind!r} is not a kind tpviz checks")
    return rule


__all__ = [
    "COMPILED",
    "DRAWN",
    "HELD",
    "Amount",
    "Any_",
    "ArrayOf",
    "Axes",
    "AxisOf",
    "Bandwidth",
    "Bytes",
    "Callback",
    "Colour",
    "Count",
    "Devices",
    "Dtype",
    "Finite",
    "Flag",
    "Floats",
    "Inches",
    "Index",
    "Indices",
    "Items",
    "JaxMesh",
    "KeyOf",
    "Keys",
    "KeywordsOf",
    "MeshShape",
    "MeshWith",
    "Name",
    "Numbers",
    "Of",
    "OneOf",
    "Positive",
    "Rate",
    "Seed",
    "Share",
    "Signed",
    "Size",
    "Sizes",
    "SpecLike",
    "SystemLike",
    "Time",
    "Tree",
]
