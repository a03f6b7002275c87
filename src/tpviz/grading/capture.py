"""In the submission's kernel, at a check cell: write the learner's answers out as plain data.

The grading runner (:mod:`tpviz.grading.runner`) runs this instead of the check cell. Each
argument of the check call is evaluated in the learner's namespace and written as plain data
(:mod:`tpviz.grading.plain`). An argument that is not plain data (a function, an object the
learner built) is marked ``code``: it is graded from the source of the exercise's answer cells,
and for that source this module also writes what the source reads from the notebook (its free
names): modules by name, library objects by their import path, plain values as data, functions
and classes from other cells by their source. Nothing here decides anything: it runs in the
learner's kernel, where the learner could change it, so all it can change is its own answer.
"""

from __future__ import annotations

import importlib
import inspect
import json
import symtable
import sys
import types

from tpviz.grading.plain import NotPlain, encode

MAX_HELPERS = 3  # levels of functions from other cells that one answer's source may use


def transformed(source: str) -> str:
    """Cell source as Python (IPython's magics and ``!`` lines made calls)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    return TransformerManager().transform_cell(source)


def free_names(source: str) -> set[str]:
    """Names ``source`` reads from the module's namespace and does not bind itself."""
    try:
        top = symtable.symtable(source, "<answer>", "exec")
    except SyntaxError:
        return set()
    bound = {s.get_name() for s in top.get_symbols()
             if s.is_assigned() or s.is_imported() or s.is_namespace()}
    names: set[str] = set()

    def walk(table, is_top: bool) -> None:
        for s in table.get_symbols():
            if (s.is_referenced() and is_top) or (not is_top and s.is_global()):
                names.add(s.get_name())
        for child in table.get_children():
            walk(child, False)

    walk(top, True)
    return names - bound


def _importable(value) -> list[str] | None:
    """``[module, qualname]`` if importing that path gives ``value`` itself."""
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__":
        return None
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:
        return None
    return [module, qualname] if found is value else None


def describe(value, depth: int = 0) -> dict:
    """How the function runner makes ``value`` again (see the module's docstring)."""
    if isinstance(value, types.ModuleType):
        return {"module": value.__name__}
    try:
        return {"value": encode(value)}
    except NotPlain:
        pass
    ref = _importable(value)
    if ref is not None:
        return {"ref": ref}
    if (getattr(value, "__module__", None) == "__main__" and depth < MAX_HELPERS
            and (inspect.isfunction(value) or inspect.isclass(value))):
        try:
            source = transformed(inspect.getsource(value))
        except (OSError, TypeError):
            return {"missing": type(value).__name__}
        return {"source": source, "context": context(source, depth + 1)}
    return {"missing": type(value).__name__}


def context(source: str, depth: int = 0) -> dict:
    """What ``source`` reads from the learner's namespace, described name by name."""
    namespace = _namespace()
    return {name: describe(namespace[name], depth) for name in sorted(free_names(source))
            if name in namespace}


def _namespace() -> dict:
    ip = sys.modules.get("IPython")
    shell = ip.get_ipython() if ip is not None else None
    return shell.user_ns if shell is not None else vars(sys.modules["__main__"])


def export(path: str, args: list[str], kwargs: dict[str, str], source: str) -> None:
    """Evaluate the check call's arguments and write them to ``path`` as JSON."""
    namespace = _namespace()
    out: dict = {"args": [], "kwargs": {}, "code": False}

    def one(expr: str) -> dict:
        try:
            value = eval(expr, namespace)
        except BaseException as e:  # a missing name, or whatever the learner's code raised
            return {"error": f"{type(e).__name__}: {e}"[:500]}
        try:
            return {"value": encode(value)}
        except NotPlain:
            out["code"] = True
            return {"code": expr, "callable": callable(value)}
        except BaseException as e:
            return {"error": f"{type(e).__name__}: {e}"[:500]}

    out["args"] = [one(e) for e in args]
    out["kwargs"] = {k: one(e) for k, e in kwargs.items()}
    if out["code"]:
        out["source"] = transformed(source)
        out["context"] = context(out["source"])
    with open(path, "w") as f:
        json.dump(out, f, allow_nan=True)
