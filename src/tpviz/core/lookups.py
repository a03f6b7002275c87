"""Rules that ask tpviz's own lookups and objects, and rules across parameters: a jax Mesh or
a mesh shape, an axis of the mesh given, a key of the dict given, a dtype, a system or a spec
(by the library's one lookup of each), a matplotlib Axes or colour, a function."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping

import numpy as np

from tpviz.core import validate as v
from tpviz.core.rules import Array, Rule
from tpviz.errors import ArgumentTypeError


class MeshRule(Rule):
    """A ``jax.sharding.Mesh`` (from ``tpviz.make_mesh``), with the axes ``axes`` if given."""

    __slots__ = ("axes",)
    what = "a jax Mesh"

    def __init__(self, axes: tuple[str, ...] = ()):
        self.axes = axes

    def check(self, name, value, error):
        if not (hasattr(value, "axis_names") and hasattr(value, "devices")):
            raise ArgumentTypeError(f"{name} must be a jax Mesh (e.g. tpviz.make_mesh((8,), "
                                    f"('X',))), got {type(value).__name__} {v._short(value)}.")
        missing = [a for a in self.axes if a not in value.axis_names]
        if missing:
            raise error(f"{name} has the axes {tuple(value.axis_names)}; it needs "
                        f"{', '.join(map(repr, missing))} (e.g. tpviz.make_mesh((8,), "
                        f"({missing[0]!r},))).")


class MeshShapeRule(Rule):
    """A mesh shape ``{axis: size}`` or a jax Mesh, each size a positive integer."""

    __slots__ = ()
    what = "a mesh shape such as {'X': 2, 'Y': 4}"

    def check(self, name, value, error):
        sizes = v.mesh_shape(name, value)
        if not sizes:
            raise error(f"{name} = {v._short(value)} has no axes: give at least one, e.g. "
                        f"{{'X': 8}}.")
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

    @property
    def of(self) -> str:
        return self.mesh

    def check(self, name, value, error):
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{name} must be a mesh axis name (a string), got "
                                    f"{v._short(value)} ({type(value).__name__}).")

    def within(self, name: str, value, mesh, error) -> None:
        """The cross-parameter check, once the mesh is known."""
        if not isinstance(value, str):
            return
        names = getattr(mesh, "axis_names", None)
        if names is None and isinstance(mesh, Mapping):
            names = tuple(mesh)
        if names is not None and value not in names:
            raise error(f"{name} = {value!r} is not an axis of {self.mesh} (its axes: "
                        f"{', '.join(map(repr, names))}).")


class Map(Rule):
    """A dict (any mapping): each key of kind ``key`` and value of kind ``value`` (None: any);
    holding every key of ``required`` and, if ``closed``, no other."""

    __slots__ = ("closed", "dims", "key", "minimum", "required", "value")
    what = "a dict"

    def __init__(self, key: Rule | None = None, value: Rule | None = None,
                 required: tuple = (), closed: bool = False, dims: dict | None = None,
                 minimum: int = 0):
        self.key, self.value, self.required, self.closed = key, value, required, closed
        self.minimum = minimum
        self.dims = {k: Array(dims=d) for k, d in (dims or {}).items()}  # key -> its array

    def check(self, name, value, error):
        if not isinstance(value, Mapping):
            raise ArgumentTypeError(f"{name} must be a dict, got {type(value).__name__} "
                                    f"{v._short(value)}.")
        missing = [k for k in self.required if k not in value]
        extra = [k for k in value if k not in self.required] if self.closed else []
        if missing or extra:
            raise error(f"{name} must hold the keys {', '.join(map(repr, self.required))}; "
                        f"{'it lacks ' + ', '.join(map(repr, missing)) if missing else ''}"
                        f"{' and ' if missing and extra else ''}"
                        f"{'it has ' + ', '.join(map(repr, extra)) if extra else ''}.")
        if len(value) < self.minimum:
            raise error(f"{name} is empty; give at least one item.")
        for k, x in value.items():
            if k in self.dims:
                self.dims[k].check(f"{name}[{k!r}]", x, error)
            if self.key is not None:
                self.key.check(f"a key of {name}", k, error)
            if self.value is not None:
                self.value.check(f"{name}[{k!r}]", x, error)


    def named_shapes(self, name: str, value) -> list[tuple[str, tuple, tuple]]:
        """(label, dims, shape) of each array the dict holds whose dimensions are named."""
        if not isinstance(value, Mapping):
            return []
        return [(f"{name}[{k!r}]", rule.dims, tuple(np.shape(value[k])))
                for k, rule in self.dims.items() if k in value]


class Tree(Rule):
    """Numbers, arrays of them, or lists, tuples and dicts of those (a pytree of numbers)."""

    __slots__ = ()
    what = "numbers or arrays (or lists and dicts of them)"

    def check(self, name, value, error):
        import jax

        from tpviz.core.rules import Array

        leaves = jax.tree_util.tree_leaves(value)
        if not leaves:
            raise error(f"{name} holds no numbers, got {v._short(value)}.")
        for leaf in leaves:
            if isinstance(leaf, bool) or not (isinstance(leaf, int | float)
                                              or hasattr(leaf, "dtype")):
                raise ArgumentTypeError(f"{name} must hold numbers or arrays, not "
                                        f"{type(leaf).__name__} {v._short(leaf)}.")
            if hasattr(leaf, "dtype"):
                Array().check(name, leaf, error)


class KeywordsOf(Rule):
    """For ``**kwargs`` passed on to ``fn``: each a keyword argument of ``fn``, of its kind."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def check(self, name, value, error):
        import inspect

        from tpviz.core.public import published

        fn = inspect.unwrap(self.fn)
        current = getattr(sys.modules.get(fn.__module__), fn.__name__, self.fn)  # the checked one
        params = inspect.signature(fn).parameters
        if name not in params or params[name].kind not in (
                inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            keywords = [n for n, p in params.items() if p.default is not p.empty]
            raise ArgumentTypeError(f"{name}= is not an argument here; the keyword arguments "
                                    f"passed on to {fn.__name__} are {', '.join(keywords)}.")
        spec = published(current)
        for _, param, rule, default in spec.checks if spec else ():
            if param == name and value is not default:
                rule.check(name, value, error)


class KeyOf(Rule):
    """A key of the dict passed as parameter ``of`` (a run's label among the runs given)."""

    __slots__ = ("of",)
    what = "a key of the dict"

    def __init__(self, of: str):
        self.of = of

    def within(self, name: str, value, other, error) -> None:
        if isinstance(other, Mapping) and value not in other:
            keys = ", ".join(map(repr, list(other)[:8]))
            raise error(f"{name} = {v._short(value)} is not a key of {self.of} (its keys: "
                        f"{keys or 'none'}).")


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
            _named(name, dtype_size, value)
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
            _named(name, as_spec, value)


def _named(name: str, lookup, value) -> None:
    """``lookup(value)``, its error saying which argument it is about."""
    from tpviz.errors import TpvizError

    try:
        lookup(value)
    except TpvizError as e:
        text = str(e.args[0]).removeprefix("spec_or_notation: ") if e.args else ""
        if e.args and not text.startswith(name):
            e.args = (f"{name}: {text}", *e.args[1:])
        raise


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
