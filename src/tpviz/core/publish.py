"""Where each topic builds its ``__all__``, ``publish(globals())`` puts every public function
through :func:`tpviz.core.public.public`, so that a new function is checked without a list."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types

from tpviz.core.public import public
from tpviz.errors import ArgumentError


def publish(namespace: dict, *, error: type[Exception] = ArgumentError) -> None:
    """Wrap every function, class and module of ``namespace["__all__"]`` with :func:`public`,
    where they are defined too (so ``tpviz.pipeline.plan.schedule`` is the checked one)."""
    package = namespace["__name__"]
    for name in namespace["__all__"]:
        obj = namespace.get(name)
        if isinstance(obj, types.ModuleType) and obj.__name__.startswith("tpviz"):
            for inner in members(obj):
                setattr(obj, inner, _publish_one(getattr(obj, inner), error,
                                                 f"{obj.__name__}.{inner}"))
        elif obj is not None:
            namespace[name] = _publish_one(obj, error, f"{package}.{name}")
    explore = sys.modules.get(f"{package}.explore")  # its render_* functions: benchmarks' too
    for module in ([explore] if explore is not None else []) + declared(package):
        for inner in members(module):
            setattr(module, inner, _publish_one(getattr(module, inner), error,
                                                f"{module.__name__}.{inner}"))


def declared(package: str) -> list[types.ModuleType]:
    """The package's loaded submodules that declare an ``__all__`` of their own: what the book
    calls by the module's path (``tpviz.collectives.plan.time``) is public too, though the
    package does not re-export it. Not ``core``'s: they are the machinery (``kinds``,
    ``verify``), and ``core``'s own ``__all__`` says what of it is public."""
    if package == "tpviz.core":
        return []
    return [m for name, m in sorted(sys.modules.items())
            if name.startswith(f"{package}.") and "." not in name[len(package) + 1:]
            and isinstance(m, types.ModuleType) and "__all__" in vars(m)]


def members(module: types.ModuleType) -> list[str]:
    """A module's public names: its ``__all__``, else what it defines (not what it imports)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [n for n, x in vars(module).items()
            if not n.startswith("_") and getattr(x, "__module__", "") == module.__name__]


def _publish_one(obj, error, label):
    if isinstance(obj, type):
        _publish_class(obj, error)
        return obj
    if not inspect.isfunction(obj) or not obj.__module__.startswith("tpviz"):
        return obj
    wrapped = public(obj, error=error, label=label.removeprefix("tpviz."))
    home = sys.modules.get(obj.__module__)
    if home is not None and getattr(home, obj.__name__, None) is obj:
        setattr(home, obj.__name__, wrapped)
    return wrapped


def _publish_class(cls: type, error) -> None:
    if (not cls.__module__.startswith("tpviz") or issubclass(cls, BaseException)
            or "__tpviz_class__" in vars(cls) or hasattr(cls, "_fields")):  # NamedTuple: hot
        return
    cls.__tpviz_class__ = True
    for name, value in list(vars(cls).items()):
        if name.startswith("_") and name != "__init__":
            continue
        label = f"{cls.__module__.removeprefix('tpviz.')}.{cls.__qualname__}.{name}"
        if inspect.isfunction(value):
            record = name == "__init__" and dataclasses.is_dataclass(cls)
            setattr(cls, name, public(value, error=error, label=label, record=record))
        elif isinstance(value, staticmethod | classmethod) and inspect.isfunction(value.__func__):
            setattr(cls, name, type(value)(public(value.__func__, error=error, label=label)))
