"""One validation mechanism for every public function: its signature says what each parameter
is (:mod:`tpviz.core.kinds`), and every call from outside tpviz is checked against it.

:func:`tpviz.core.publish.publish` wraps everything a topic's ``__all__`` holds. The wrapper reads
the signature once; a call then costs a few microseconds, and calls from inside tpviz skip the
checks (a redraw pays nothing). A NaN result, a negative one where a ``Time``, ``Amount`` or
``Count`` is declared, or a NaN in a float field of a returned dataclass is an error.
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import functools
import inspect
import math
import sys
import types
import typing

import numpy as np

from tpviz.core import compound as c
from tpviz.core import lookups as k
from tpviz.core import rules as r
from tpviz.errors import ArgumentError, TpvizError

MARK = "__tpviz_public__"  # on a wrapper: its Spec
_PASS_THROUGH = frozenset({"dataclasses", "functools", "contextlib", "copy"})


def rule_for(annotation, default=inspect.Parameter.empty, *, result: bool = False,
             record: bool = False):
    """The rule a resolved annotation stands for (None: nothing tpviz checks). ``default`` tunes
    the plain kinds (a default is always admissible); ``result`` reads a return annotation;
    ``record`` a field of a dataclass of results (plain ``int`` >= 0, ``float`` any sign)."""
    if isinstance(annotation, r.Rule):
        return annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return next((m for m in args[1:] if isinstance(m, r.Rule)), None) or rule_for(
            args[0], default, result=result, record=record)
    if annotation is bool:
        return r.FlagRule()
    if annotation is int:
        low = 0 if record else 1
        if isinstance(default, int) and not isinstance(default, bool) and default < 1:
            low = 0 if default == 0 else None
        return r.Int(low)
    if annotation is float:
        real = isinstance(default, int | float) and not isinstance(default, bool)
        low = None if result or record or (real and default < 0) else 0.0
        return r.Real(low, infinite=real and math.isinf(default))
    if annotation is str:  # a name: not "" unless that is its default (a title, a prefix)
        return r.Text(empty=default == "" or result or record)
    if origin is typing.Literal:
        return r.Choice(args)
    if origin in (typing.Union, types.UnionType):
        rules = [rule_for(a, default, result=result, record=record)
                 for a in args if a is not type(None)]
        if any(x is None for x in rules):
            return None
        one = rules[0] if len(rules) == 1 else c.Either(*rules)
        return c.Maybe(one) if type(None) in args else one
    if origin in (tuple, list, abc.Sequence, abc.MutableSequence):
        fixed = origin is tuple and args and args[-1] is not Ellipsis
        items = [rule_for(a, result=result, record=record)
                 for a in (args[:1] if not fixed else args)]
        item = items[0] if items and (not fixed or len(set(map(type, items))) == 1) else None
        empty = record or (isinstance(default, tuple | list) and not default)
        size = len(args) if fixed else None
        return c.Seq(item, size if fixed else int(not empty), size)
    if origin in (dict, abc.Mapping) or annotation in (dict, abc.Mapping):
        key, value = (rule_for(a, result=result, record=record) for a in args) if args else (
            None, None)
        return k.Map(key, value, minimum=int(bool(args) and not record))
    if annotation is np.ndarray:
        return c.Maybe(r.Array()) if record else r.Array()
    if annotation is abc.Callable or origin is abc.Callable:
        return k.Function()
    cost = sys.modules.get("tpviz.core.cost")
    if cost is not None and annotation is cost.System and not record:  # or its name: one lookup
        return k.Lookup("system")
    if isinstance(annotation, type) and annotation is not object:
        return r.Instance(annotation)
    return None


@dataclasses.dataclass
class Spec:
    """What the wrapper checks: (index or None, name, rule, default) per parameter."""

    label: str
    checks: list
    star: tuple | None = None  # (index, rule) for *args
    extra: object = None  # the rule of each **kwargs value
    cross: list = dataclasses.field(default_factory=list)  # (name, AxisOf, mesh index, default)
    shaped: list = dataclasses.field(default_factory=list)  # (index, name, Array with dims)
    result: object = None
    undeclared: tuple = ()  # parameters with no kind (tests list them)


def spec_of(fn, label: str, record: bool = False) -> Spec:
    """Read ``fn``'s signature once: a rule per parameter (the annotations are resolved in the
    function's module)."""
    sig = inspect.signature(fn)
    space = getattr(fn, "__globals__", {})
    spec, positions, undeclared = Spec(label, []), {}, []
    for i, (name, p) in enumerate(sig.parameters.items()):
        positions[name] = i if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else None
        if i == 0 and name in ("self", "cls"):
            continue
        rule = rule_for(_resolve(p.annotation, space), p.default, record=record)
        if rule is None:
            undeclared.append(name)
            continue
        if p.default is None and not isinstance(rule, c.Maybe):
            rule = c.Maybe(rule)
        if p.kind is p.VAR_POSITIONAL:
            spec.star = (i, rule)
        elif p.kind is p.VAR_KEYWORD:
            spec.extra = rule
        else:
            spec.checks.append((positions[name], name, rule, p.default))
    for index, name, rule, _ in spec.checks:
        inner = rule.rule if isinstance(rule, c.Maybe) else rule
        if (isinstance(inner, r.Array) and inner.dims) or (isinstance(inner, k.Map) and inner.dims):
            spec.shaped.append((index, name, inner))
        if hasattr(inner, "within") and inner.of in positions:  # AxisOf, KeyOf
            other_default = sig.parameters[inner.of].default
            spec.cross.append((index, name, inner, positions[inner.of], other_default,
                               sig.parameters[name].default))
    if sig.return_annotation is not sig.empty:
        res = rule_for(_resolve(sig.return_annotation, space), result=True)
        spec.result = res if res is not None and type(res).result is not r.Rule.result else None
    spec.undeclared = tuple(undeclared)
    return spec


def _resolve(annotation, space):
    if not isinstance(annotation, str):
        return None if annotation is inspect.Parameter.empty else annotation
    try:
        return eval(annotation, space)
    except Exception:  # a name only imported for type checkers: nothing to check
        return None


def _value(index, name, args, kwargs, default):
    if index is not None and index < len(args):
        return args[index]
    return kwargs.get(name, default)


def check(spec: Spec, args: tuple, kwargs: dict, error: type[Exception]) -> None:
    """Check a call's arguments against ``spec``, raising the first problem found."""
    n = len(args)
    for index, name, rule, default in spec.checks:
        if index is not None and index < n:
            value = args[index]
        elif name in kwargs:
            value = kwargs[name]
        else:
            continue
        if value is not default:
            rule.check(name, value, error)
    if spec.star is not None:
        for j, value in enumerate(args[spec.star[0]:]):
            spec.star[1].check(f"*args[{j}]", value, error)
    if spec.extra is not None:
        named = {name for _, name, _, _ in spec.checks}
        for name, value in kwargs.items():
            if name not in named:
                spec.extra.check(name, value, error)
    if spec.shaped:
        _agree(spec, args, kwargs, error)
    for index, name, rule, other_index, other_default, default in spec.cross:
        value = _value(index, name, args, kwargs, default)
        other = _value(other_index, rule.of, args, kwargs, other_default)
        if other is not None and other is not inspect.Parameter.empty:
            rule.within(name, value, other, error)


def _agree(spec: Spec, args: tuple, kwargs: dict, error) -> None:
    """The named dimensions of the function's arrays agree (``H`` of x is ``H`` of w1)."""
    seen: dict[str, tuple[int, str]] = {}
    shapes = [s for index, name, rule in spec.shaped
              for s in rule.named_shapes(name, _value(index, name, args, kwargs, None))]
    for name, dims, shape in shapes:
        for dim, size in zip(reversed(dims), reversed(shape), strict=False):
            if dim == "...":
                break
            if dim in seen and seen[dim][0] != size and not dim.isdigit():
                raise error(f"{name} has {dim} = {size} (shape {shape}), but {seen[dim][1]} has "
                            f"{dim} = {seen[dim][0]}: give arrays whose {dim} agree.")
            seen.setdefault(dim, (size, name))


def check_result(spec: Spec, value, error: type[Exception], args=(), kwargs=None) -> None:
    """A NaN where a number must be one, or a negative size or time, is an error."""
    problem = spec.result.result(value) if spec.result is not None else ""
    if not problem and dataclasses.is_dataclass(value) and not isinstance(value, type):
        problem = _field_problem(value)
    if problem:
        given = ", ".join([*map(repr, args), *(f"{k}={x!r}" for k, x in (kwargs or {}).items())])
        raise error(f"the result is {problem} for ({given[:120]}): these arguments are outside "
                    f"what the formula covers; check them against the docstring.")


def _field_problem(value) -> str:
    for name in _float_fields(type(value)):
        x = getattr(value, name, None)
        if isinstance(x, float) and math.isnan(x):
            return f"NaN in its {name}"
    return ""


@functools.cache
def _float_fields(cls) -> tuple[str, ...]:
    if not cls.__module__.startswith("tpviz"):
        return ()
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.type in ("float", float) and not (isinstance(f.default, float)
                                                        and math.isnan(f.default)))


def _internal(frame) -> bool:
    """Whether the call comes from tpviz itself (through dataclasses' replace and friends)."""
    name = frame.f_globals.get("__name__", "")
    while name in _PASS_THROUGH and frame.f_back is not None:
        frame = frame.f_back
        name = frame.f_globals.get("__name__", "")
    return name.startswith("tpviz")


def public(fn=None, *, error: type[Exception] = ArgumentError, label: str | None = None,
           record: bool = False):
    """Wrap ``fn`` so that each call from outside tpviz is checked against its signature (see
    the module's docstring). Usable as ``@public`` or ``@public(error=ScheduleError)``."""
    if fn is None:
        return functools.partial(public, error=error, label=label, record=record)
    if hasattr(fn, MARK):
        return fn
    spec = spec_of(fn, label or fn.__qualname__, record)

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        if _internal(sys._getframe(1)):
            return fn(*args, **kwargs)
        try:
            check(spec, args, kwargs, error)
            try:
                out = fn(*args, **kwargs)
            except NameError as e:  # a collective's axis, outside jax.shard_map
                if "axis name" not in str(e):
                    raise
                raise error(f"it runs inside jax.shard_map, over a mesh axis it names ("
                            f"{str(e).splitlines()[0]}): call it in the function you give "
                            f"jax.shard_map, or with axis=None where it takes one.") from e
            check_result(spec, out, error, args, kwargs)
        except TpvizError as e:
            _prefix(e, spec.label)
            raise
        return out

    setattr(checked, MARK, spec)
    return checked


def _prefix(e: TpvizError, label: str) -> None:  # once: "pipeline.schedule: stages must ..."
    if e.args and not str(e.args[0]).startswith(label.rpartition(".")[2]) and not hasattr(
            e, "_named"):
        e.args = (f"{label}: {e.args[0]}", *e.args[1:])
    e._named = True


def published(obj) -> Spec | None:
    """The :class:`Spec` a public function is checked against (None: not wrapped)."""
    return getattr(obj, MARK, None)
