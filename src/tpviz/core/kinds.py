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

import math
from collections.abc import Callable, Mapping
from typing import Annotated

from tpviz.core import validate as v
from tpviz.core.rules import EXACT, Array, Choice, Either, FlagRule, Int, Real, Rule, Seq, Text
from tpviz.errors import ArgumentTypeError


class MeshRule(Rule):
    """A ``jax.sharding.Mesh`` (from ``tpviz.make_mesh``)."""

    __slots__ = ()
    what = "a jax Mesh"

    def check(self, name, value, error):
        if not (hasattr(value, "axis_names") and hasattr(value, "devices")):
            raise ArgumentTypeError(f"{name} must be a jax Mesh (e.g. tpviz.make_mesh((8,), "
                                    f"('X',))), got {type(value).__name__} {v._short(value)}.")


class MeshShapeRule(Rule):
    """A mesh shape ``{axis: size}`` or a jax Mesh, each size a positive integer."""

    __slots__ = ()
    what = "a mesh shape such as {'X': 2, 'Y': 4}"

    def check(self, name, value, error):
        sizes = v.mesh_shape(name, value)
        total = math.prod(sizes.values())
        if total > 2**20:
            raise error(f"{name} = {v._short(value)} has {total:,} devices, more than the bound "
                        f"of {2**20:,} (more than any machine has).")


class AxisOf(Rule):
    """A name of an axis of the mesh (or mesh shape) passed as parameter ``mesh``."""

    __slots__ = ("mesh",)
    what = "a mesh axis name"

    def __init__(self, mesh: str = "mesh"):
        self.mesh = mesh

    def check(self, name, value, error):
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{name} must be a mesh axis name (a string), got "
                                    f"{v._short(value)} ({type(value).__name__}).")

    def within(self, name: str, value, mesh, error) -> None:
        """The cross-parameter check, once the mesh is known."""
        names = getattr(mesh, "axis_names", None)
        if names is None and isinstance(mesh, Mapping):
            names = tuple(mesh)
        if names is not None and value not in names:
            raise error(f"{name} = {value!r} is not an axis of {self.mesh} (its axes: "
                        f"{', '.join(map(repr, names))}).")


class Function(Rule):
    __slots__ = ()
    what = "a function"

    def check(self, name, value, error):
        if not callable(value):
            raise ArgumentTypeError(f"{name} must be a function, got {type(value).__name__} "
                                    f"{v._short(value)}.")


class Anything(Rule):
    """Declared on purpose as taking any value (the function itself makes sense of it)."""

    __slots__ = ()


class Lookup(Rule):
    """A value the library's own lookup accepts: ``dtype`` (a dtype's name or a NumPy dtype,
    :func:`tpviz.core.layout.dtype_size`), ``system`` (a :class:`tpviz.core.cost.System` or
    its name, :func:`tpviz.core.cost.system`) or ``spec`` (a PartitionSpec or a notation
    string such as ``"A[I_X, J]"``, :func:`tpviz.core.notation.as_spec`)."""

    __slots__ = ("kind",)

    def __init__(self, kind: str):
        self.kind = kind

    @property
    def what(self):
        return {"dtype": "a dtype", "system": "a System or its name",
                "spec": "a PartitionSpec or notation string"}[self.kind]

    def check(self, name, value, error):
        if self.kind == "dtype":
            from tpviz.core.layout import dtype_size

            if isinstance(value, bool) or value is None or isinstance(value, int | float):
                raise ArgumentTypeError(f"{name} must be a dtype such as 'float32' or 'bf16', "
                                        f"got {v._short(value)} ({type(value).__name__}).")
            dtype_size(value)
        elif self.kind == "system":
            from tpviz.core.cost import system

            system(value, name)
        else:
            from jax.sharding import PartitionSpec

            from tpviz.core.notation import as_spec

            if not isinstance(value, str | PartitionSpec):
                raise ArgumentTypeError(f"{name} must be a PartitionSpec or a notation string "
                                        f"such as 'A[I_X, J]', got {v._short(value)} "
                                        f"({type(value).__name__}).")
            as_spec(value)


class AxesRule(Rule):
    """A matplotlib ``Axes`` to draw into."""

    __slots__ = ()
    what = "a matplotlib Axes"

    def check(self, name, value, error):
        if not (hasattr(value, "add_patch") and hasattr(value, "figure")):
            raise ArgumentTypeError(f"{name} must be a matplotlib Axes (e.g. from "
                                    f"plt.subplots()), got {type(value).__name__} "
                                    f"{v._short(value)}.")


class ColourRule(Rule):
    __slots__ = ()
    what = "a matplotlib colour"

    def check(self, name, value, error):
        from matplotlib.colors import is_color_like

        if isinstance(value, bool) or not is_color_like(value):
            raise ArgumentTypeError(f"{name} must be a colour such as 'C0', '#1f77b4' or "
                                    f"(0.1, 0.2, 0.3), got {v._short(value)}.")


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


def Size(maximum: int, why: str, minimum: int = 1):
    """An integer in ``[minimum, maximum]``; the error says the bound and ``why``."""
    return Annotated[int, Int(minimum, maximum, why)]


def OneOf(options):
    """A name from ``options`` (a collection, or a function returning one)."""
    return Annotated[str, Choice(options)]


def Sizes(maximum: int | None = EXACT, why: str = "", *, minimum: int = 1,
          length: int | None = None):
    """A shape: a tuple of integers in ``[minimum, maximum]``, of ``length`` if given."""
    return Annotated[tuple, Seq(Int(minimum, maximum, why), length or 0, length)]


def ArrayOf(ndim: int | None = None, *, finite: bool = False, integer: bool = False):
    """An array of numbers (``ndim`` dimensions, finite, integers, if asked)."""
    return Annotated[object, Array(ndim, finite, integer)]


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
    "Inches",
    "Index",
    "Indices",
    "Items",
    "JaxMesh",
    "MeshShape",
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
]
