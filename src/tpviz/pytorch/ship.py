"""Send a class written in a notebook to the gloo workers (groundwork for 13.4's own style).

The workers start from a forkserver (:mod:`tpviz.core.launch`), and ``pickle`` sends a class by
its module and name: a class defined in a notebook lives in ``__main__``, which the workers
cannot import. :func:`pack` sends the class by value instead: its name, its bases (importable
classes such as torch's ``ParallelStyle``), its plain attributes pickled, its functions as their
code objects (``marshal``), and the globals those functions name: modules by their name,
functions written in the notebook by their code (and the globals they name), other values
pickled. :func:`unpack` builds the same class in the worker. Closures made while a
method runs (the hooks a ``ParallelStyle`` hands ``distribute_module``) need nothing more.

Only for this interpreter: ``marshal``'s code objects are read by the same Python version, which
the forkserver's workers are.
"""

from __future__ import annotations

import importlib
import marshal
import pickle
import types

from tpviz.errors import ArgumentTypeError

SKIP = ("__dict__", "__weakref__", "_abc_impl")  # made again by ``type`` and ``ABCMeta``


def _names(code: types.CodeType, space: dict, out: dict) -> None:
    """The globals ``code`` (and the functions defined inside it) reads, as ``out[name] =
    ("module", its name)`` or ``("value", its pickle)``."""
    for name in code.co_names:
        if name in space and name not in out:
            value = space[name]
            if isinstance(value, types.ModuleType):
                out[name] = ("module", value.__name__)
            elif isinstance(value, types.FunctionType) and not importable(value):
                _closed(value, name)  # a helper written in the notebook: by its code too
                out[name] = ("function", marshal.dumps(value.__code__),
                             pickle.dumps(value.__defaults__))
                _names(value.__code__, value.__globals__, out)
            else:
                try:
                    out[name] = ("value", pickle.dumps(value))
                except Exception as e:
                    raise ArgumentTypeError(
                        f"the global `{name}` that your class uses cannot be sent to the "
                        f"worker processes ({type(e).__name__}: {e}); define what it is inside "
                        "the class, or import it from a module.") from None
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _names(const, space, out)


def _closed(fn, where: str) -> None:
    """Refuse a function that reads variables of the function it was made in (a closure)."""
    if fn.__code__.co_freevars not in ((), ("__class__",)):  # __class__: for super()
        raise ArgumentTypeError(f"{where} uses variables of the function it was defined in; "
                                "define it at the top of a cell.")


def _function(value):
    """``(kind, function)`` for a function, a staticmethod or a classmethod; else None."""
    for kind, wrapper in (("static", staticmethod), ("class", classmethod)):
        if isinstance(value, wrapper) and isinstance(value.__func__, types.FunctionType):
            return kind, value.__func__
    return ("plain", value) if isinstance(value, types.FunctionType) else None


def pack(cls: type) -> bytes:
    """``cls`` as bytes that :func:`unpack` turns back into the class in another process of
    this Python. Raises :class:`ArgumentTypeError` for what cannot be sent (a method's closure
    over a local variable, a global that cannot be pickled)."""
    if not isinstance(cls, type):
        raise ArgumentTypeError(f"pack({cls!r}): give a class.")
    body, space = {}, {}
    for key, value in vars(cls).items():
        if key in SKIP:
            continue
        found = _function(value)
        if found is None:
            try:
                body[key] = ("attribute", pickle.dumps(value), None)
            except Exception as e:
                raise ArgumentTypeError(
                    f"{cls.__name__}.{key} cannot be sent to the worker processes "
                    f"({type(e).__name__}: {e}); write it as a plain method.") from None
            continue
        kind, fn = found
        _closed(fn, f"{cls.__name__}.{key}")
        _names(fn.__code__, fn.__globals__, space)
        body[key] = (kind, marshal.dumps(fn.__code__), pickle.dumps(fn.__defaults__))
    bases = [("class", pack(b)) if not importable(b) else ("import", b) for b in cls.__bases__]
    return pickle.dumps((cls.__name__, bases, body, space))


def unpack(blob: bytes) -> type:
    """The class :func:`pack` made ``blob`` of; its functions see the globals they named, and
    the class itself under its name (so that its methods may name it)."""
    name, bases, body, names = pickle.loads(blob)
    bases = tuple(unpack(b) if kind == "class" else b for kind, b in bases)
    space: dict = {"__builtins__": __builtins__, "__name__": "__tpviz_shipped__"}
    for key, (kind, value, *defaults) in names.items():
        space[key] = (importlib.import_module(value) if kind == "module" else
                      types.FunctionType(marshal.loads(value), space, key,
                                         pickle.loads(defaults[0])) if kind == "function" else
                      pickle.loads(value))
    attrs, cell = {}, types.CellType()  # the class, for methods that call super()
    for key, (kind, value, defaults) in body.items():
        if kind == "attribute":
            attrs[key] = pickle.loads(value)
            continue
        code = marshal.loads(value)
        fn = types.FunctionType(code, space, key, pickle.loads(defaults),
                                (cell,) if code.co_freevars else None)
        attrs[key] = {"static": staticmethod, "class": classmethod}.get(kind, lambda f: f)(fn)
    attrs["__module__"] = space["__name__"]
    cls = type(bases[0])(name, bases, attrs)
    space[name] = cell.cell_contents = cls
    return cls


TAG = "tpviz-shipped"


def importable(cls: type) -> bool:
    """Whether a worker finds ``cls`` by its module and name (what ``pickle`` sends): an
    installed library's class or tpviz's; one written in a notebook or in a test is sent by
    value."""
    from tpviz.core.values import _library_type

    return cls.__module__ == "builtins" or _library_type(cls)


def pack_plan(plan: dict) -> dict:
    """``plan`` with each style whose class a worker cannot import (one written in a notebook)
    replaced by ``(TAG, its class packed, its attributes pickled)``; the others as they are."""
    return {key: style if importable(type(style)) else
            (TAG, pack(type(style)), pickle.dumps(vars(style))) for key, style in plan.items()}


def unpack_plan(plan: dict) -> dict:
    """The styles of :func:`pack_plan`'s ``plan``, made again in this process."""
    out = {}
    for key, style in plan.items():
        if isinstance(style, tuple) and len(style) == 3 and style[0] == TAG:
            cls = unpack(style[1])
            style = cls.__new__(cls)
            vars(style).update(pickle.loads(plan[key][2]))
        out[key] = style
    return out
