"""Keep the book's own answers out of reach while a learner's code runs and traces.

A build exercise asks the learner to write what a library function already does
(``tpviz.megatron.row_parallel``, ``tpviz.mesh2d.run.mlp``, ``TpuSlice.price``). While the
learner's function runs, :func:`unavailable` watches every Python call made in the current
thread (``sys.setprofile``): a call that enters the code of a declared function fails with
:class:`Unavailable`, whose message names it. The watch is by code object, so it also catches

- aliases and re-exports (``megatron.f`` is ``copy_to_tp_region``), names imported into the
  notebook (``from tpviz.megatron import row_parallel``), references kept in closures,
  ``functools.partial`` objects and default arguments;
- programs the library built *before* the check: the per-device functions that
  ``collectives.follow`` or ``matmul.explicit`` return are nested code of the declared function,
  and they are watched too (their code runs when the checker traces the program);
- ``jax.custom_vjp`` / ``custom_jvp`` objects (their primal, forward and backward functions) and
  ``jax.jit`` wrappers (the wrapped function), as long as the checker makes JAX trace again: a
  checker uses inputs of its own shapes, which the notebook never compiled for.

Everything else stays usable: ``jax.lax.*``, ``tpviz.make_mesh``, and library functions that are
not declared. Calls that happened are recorded even if the learner's code catches the exception
(``except BaseException``), and the watch is removed on every exit path. Calling
``sys.setprofile`` while watched (to switch the watch off around a call, even if it is put back
afterwards) is recorded as such.

Only the calling thread is watched: the checker framework runs the learner's code in its worker
thread (:mod:`tpviz.core.sandbox`), and so does every call made inside :func:`unavailable`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import types
from collections.abc import Iterable, Iterator

from tpviz.errors import ArgumentError

_SETPROFILE = sys.setprofile  # the builtin, whatever name a learner's code reaches it by


class Unavailable(BaseException):
    """The learner's code called one of the book's answers (learner's code cannot swallow it)."""

    def __init__(self, name: str):
        super().__init__(message(name))
        self.name = name


def message(name: str) -> str:
    """What a checker says when the learner's code called ``name`` (a name watched as
    ``"jax.vjp.__wrapped__"``, the function inside a wrapper that many share, says ``jax.vjp``)."""
    name = name.removesuffix(".__wrapped__")
    return (f"this exercise asks you to write what `{name}` does, and your code called it. "
            "Write it yourself, with the building blocks the exercise names.")


def resolve(name: str):
    """The object a dotted name refers to: ``"tpviz.megatron.row_parallel"``,
    ``"tpviz.core.hardware.TpuSlice.price"`` (a module, then attributes)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            break
        return obj
    raise ArgumentError(f"unavailable: {name!r} does not name an importable object; give the "
                        "dotted path of a function, e.g. 'tpviz.megatron.row_parallel'.")


def codes(obj, seen: set | None = None) -> set[types.CodeType]:
    """Every code object that running ``obj`` may enter: its own and all nested ones."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return set()
    seen.add(id(obj))
    if isinstance(obj, types.CodeType):
        found = {obj}
        for const in obj.co_consts:
            if isinstance(const, types.CodeType):
                found |= codes(const, seen)
        return found
    if isinstance(obj, types.FunctionType):
        if hasattr(obj, "__tpviz_public__"):  # the checks' wrapper, shared by every public
            return codes(obj.__wrapped__, seen)  # function: the function it wraps
        return codes(obj.__code__, seen)
    if isinstance(obj, types.MethodType | staticmethod | classmethod):
        return codes(obj.__func__, seen)
    if isinstance(obj, functools.partial):
        return codes(obj.func, seen)
    if isinstance(obj, property):
        return set().union(*(codes(f, seen) for f in (obj.fget, obj.fset) if f))
    found: set = set()
    for attribute in ("__wrapped__", "fun", "fwd", "bwd", "jvp"):  # jit, custom_vjp/_jvp
        inner = getattr(obj, attribute, None)
        if callable(inner):
            found |= codes(inner, seen)
    if isinstance(obj, type):
        for value in vars(obj).values():
            found |= codes(value, seen)
    return found


@contextlib.contextmanager
def unavailable(names: Iterable[str]) -> Iterator[list[str]]:
    """Within the block, calling the code of any of ``names`` (dotted paths) raises
    :class:`Unavailable` in this thread. Yields the list of names that were called, which the
    caller reads after the block even if the exception was swallowed."""
    watched: dict[types.CodeType, str] = {}
    for name in names:
        for code in codes(resolve(name)):
            watched.setdefault(code, name)
    called: list[str] = []
    if not watched:
        yield called
        return
    previous = sys.getprofile()

    closing = False

    def watch(frame, event, arg):
        if previous is not None:
            previous(frame, event, arg)
        if event == "call" and frame.f_code in watched:
            called.append(watched[frame.f_code])  # (raising switches the watch off: done)
            raise Unavailable(watched[frame.f_code])
        if event == "call" and frame.f_code.co_name == "checked" and \
                frame.f_globals.get("__name__") == "tpviz.core.public":  # a public wrapper:
            code = getattr(frame.f_locals.get("fn"), "__code__", None)  # its checks come first
            if code in watched:
                called.append(watched[code])
                raise Unavailable(watched[code])
        if event == "c_call" and arg is _SETPROFILE and not closing:
            called.append("sys.setprofile")  # switching the watch off, even for a moment
            raise Unavailable("sys.setprofile")

    sys.setprofile(watch)
    try:
        yield called
        if not called and sys.getprofile() is not watch:
            called.append("sys.setprofile")  # the learner's code switched the watch off
    finally:
        closing = True
        sys.setprofile(previous)
