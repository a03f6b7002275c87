"""The harness of ``tests/test_public.py``: every public function of tpviz (each topic's
``__all__``, ``core``'s modules, ``setup_devices`` and ``make_mesh``; the public methods and
constructors of the classes among them), a valid call of each built from what its signature
declares, and a worker process that runs calls one by one under a time limit and a memory cap.

Nothing here lists functions: a new one in an ``__all__`` is walked, and a valid value of a
class it takes is made by a public function whose return annotation is that class.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import math
import multiprocessing as mp
import sys
import time
import types
import typing
from dataclasses import dataclass

ERROR_S = 2.0  # a refusal comes within this
LIMIT_S = 20.0  # a valid result within this, else a hang
BASELINE_S = 5.0  # a valid call of a function is timed once, up to this
CAP_BYTES = 1 << 30  # memory a call may take beyond what the worker holds
EXTRA_ROOTS = ("core", "cluster")
NAN, INF = math.nan, math.inf
# values of the wrong kind for any parameter: negative, zero, fractional, NaN, infinite, huge;
# bools and truthy strings; names that are not names; empty sequences; wrong types
WRONG = (-1, 0, -2**31, 2.5, -0.5, NAN, INF, -INF, 10**9, 10**18, 10**30, 1e300, True, False,
         "yes", "no", "False", "", "bogus", None, (), [], (0,), (-1, 2), (NAN,), ("x", 3),
         {"bogus": 1}, b"8", 3 + 4j)


class Resized:
    """Stands for the parameter's valid value (its default or example) one item shorter
    (``by=-1``) or longer (``by=1``): a mismatched sequence."""

    def __init__(self, by: int):
        self.by = by

    def __repr__(self):
        return f"<the valid sequence {'one item shorter' if self.by < 0 else 'one item longer'}>"

    def of(self, value):
        if not isinstance(value, tuple | list) or not value:
            return value
        return value[:-1] if self.by < 0 else type(value)([*value, value[0]])


RESIZED = (Resized(-1), Resized(1))


@dataclass(frozen=True)
class Target:
    """One callable: ``module:path`` (``Class.method``, ``Class.__init__`` or a function)."""

    label: str
    params: tuple[str, ...]  # the parameters one may pass (not self; "bogus" for **kwargs)


def roots() -> list[types.ModuleType]:
    import tpviz

    return [importlib.import_module(f"tpviz.{m}") for m in (*tpviz.TOPICS, *EXTRA_ROOTS)]


def declared_targets(package: str) -> list[types.ModuleType]:
    """``package``'s submodules with an ``__all__`` of their own (tpviz.core.publish.declared)
    that the fuzzing and the result checks cover: not ``exercises``, the checkers (their own
    tests grade them), loaded or not by earlier tests, so that the targets would otherwise
    depend on the order the tests ran in."""
    from tpviz.core.publish import declared

    return [m for m in declared(package) if m.__name__.rsplit(".", 1)[-1] != "exercises"]


def walk() -> dict[str, object]:
    """label -> function, method or constructor: everything public, each once."""
    import tpviz
    from tpviz.core.publish import members

    found: dict[str, object] = {}
    seen: set[int] = set()

    def visit(module, prefix: str, depth: int) -> None:
        for name in members(module):
            value = getattr(module, name, None)
            label = f"{prefix}.{name}"
            if isinstance(value, types.ModuleType):
                if value.__name__.startswith("tpviz") and depth == 0:
                    visit(value, label, 1)
            elif isinstance(value, type):
                if issubclass(value, BaseException) or not value.__module__.startswith("tpviz"):
                    continue
                for inner, attr in vars(value).items():
                    fn = getattr(attr, "__func__", attr)
                    if (inner == "__init__" or not inner.startswith("_")) and \
                            inspect.isfunction(fn) and id(fn) not in seen:
                        seen.add(id(fn))
                        found[f"{label}.{inner}"] = fn
            elif inspect.isfunction(value) and value.__module__.startswith("tpviz") and \
                    id(value) not in seen:
                seen.add(id(value))
                found[label] = value

    for module in roots():
        visit(module, module.__name__.removeprefix("tpviz."), 0)
        for sub in declared_targets(module.__name__):  # a submodule's own __all__: public too
            visit(sub, sub.__name__.removeprefix("tpviz."), 1)
    for name in ("setup_devices", "make_mesh"):
        found[f"tpviz.{name}"] = getattr(tpviz, name)
    return found


def targets() -> dict[str, Target]:
    out = {}
    for label, fn in walk().items():
        names = [("bogus" if p.kind is p.VAR_KEYWORD else n)
                 for n, p in inspect.signature(fn).parameters.items()
                 if n not in ("self", "cls") and p.kind is not p.VAR_POSITIONAL]
        out[label] = Target(label, tuple(names))
    return out


# --- inside the worker --------------------------------------------------------------------------

class Examples:
    """Valid values from the declared kinds; an instance of a class from a public function that
    returns one (found by its return annotation)."""

    def __init__(self, functions: dict[str, object]):
        from tpviz.core.lookups import AxisOf
        from tpviz.core.public import _resolve, published

        self.functions, self.made, self.producers = functions, {}, {}
        self.strings: dict[tuple, list[str]] = {}  # (topic or None, parameter) -> defaults
        self.axis: dict[str, str] = {}  # function -> the default of its mesh-axis parameter
        self.registry: dict[type, object] = {}  # an instance from the library's own tables
        for module in [m for name, m in list(sys.modules.items()) if name.startswith("tpviz.")]:
            for table in vars(module).values():
                items = (table.values() if isinstance(table, dict) else
                         table if isinstance(table, tuple | list) else ())
                for item in list(items)[:50]:
                    if type(item).__module__.startswith("tpviz"):
                        self.registry.setdefault(type(item), item)
        for label, fn in functions.items():
            spec = published(fn)
            for _, _name, rule, default in spec.checks if spec else ():
                inner = getattr(rule, "rule", rule)
                if isinstance(inner, AxisOf) and isinstance(default, str):
                    self.axis[label] = default
            for name, p in inspect.signature(fn).parameters.items():
                if isinstance(p.default, str) and p.default:
                    for key in ((label.split(".")[0], name), (None, name)):
                        self.strings.setdefault(key, []).append(p.default)
            if label.endswith(".__init__"):  # a class makes itself, after its producers
                self.producers.setdefault(_owner(functions, label), []).append(label)
            elif "." not in fn.__qualname__:  # a function (not a method)
                raw = inspect.unwrap(fn)
                ret = _resolve(inspect.signature(raw).return_annotation, raw.__globals__)
                ret = typing.get_origin(ret) or ret  # dict[str, X]: a dict
                if isinstance(ret, type):
                    self.producers.setdefault(ret, []).insert(0, label)

    def text(self, label: str, name: str) -> str:
        """A name another public function of the topic (or any) takes as its default for a
        parameter of the same name, the most common one; else "X"."""
        for key in ((label.split(".")[0], name), (None, name)):
            if key in self.strings:
                values = self.strings[key]
                return max(values, key=values.count)
        return "X"

    def of_rule(self, rule, depth: int, label: str = "", name: str = ""):
        from tpviz.core import compound as c
        from tpviz.core import lookups as k
        from tpviz.core import rules as r

        match rule:
            case c.Maybe():
                return None
            case r.Int():
                low = 1 if rule.minimum is None else rule.minimum
                return max(low, min(8, rule.maximum or 8))  # 8: divides the 8 devices
            case r.Real():
                return 1.0 if rule.maximum is None or rule.maximum >= 1 else rule.maximum / 2
            case r.FlagRule():
                return False
            case r.Choice():
                options = rule.options() if callable(rule.options) else rule.options
                return next(iter(options))
            case k.Lookup():
                return {"dtype": "float32", "system": "H100 (NVLink)",
                        "spec": "A[I_X, J]"}[rule.kind]
            case k.MeshShapeRule():
                return {"X": 2, "Y": 4}
            case k.MeshRule():
                import tpviz

                axis = self.axis.get(label) or (rule.axes[0] if rule.axes else None)
                return (tpviz.make_mesh((8,), (axis,)) if axis else
                        tpviz.make_mesh((2, 4), ("X", "Y")))
            case k.AxisOf():
                return self.axis.get(label) or "X"
            case k.Map():
                return self.mapping(rule, depth)
            case k.Tree():
                import numpy as np

                return np.ones((4, 4), np.float32)
            case c.Seq():
                item = None if rule.item is None else self.of_rule(rule.item, depth)
                return tuple([item] * (rule.maximum or max(rule.minimum, 2)))
            case r.Array():
                import numpy as np

                dims = rule.dims or ("N",) * (rule.ndim or 2)
                shape = [int(d) if d.isdigit() else 8 for d in dims if d != "..."]
                if rule.integer:
                    return np.zeros(shape, np.int32)
                return np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            case r.Instance():
                cls = rule.cls[0] if isinstance(rule.cls, tuple) else rule.cls
                return self.instance(cls, depth + 1)
            case c.Either():  # the first alternative that has an example, objects first
                order = sorted(rule.rules, key=lambda x: not isinstance(x, r.Instance))
                made = (self.of_rule(x, depth, label, name) for x in order)
                return next((x for x in made if x is not None), None)
            case k.Function():
                return lambda *a, **kw: None
            case k.AxesRule():
                import matplotlib.pyplot as plt

                return plt.figure().add_subplot()
            case k.ColourRule():
                return "C0"
            case r.Text():
                return self.text(label, name)
        return None

    def mapping(self, rule, depth: int):
        """A dict holding the keys ``rule`` requires: from a public function returning one."""
        if not rule.required:
            return {}
        key = ("dict", rule.required)
        if key not in self.made:
            self.made[key] = None
            for label in self.producers.get(dict, ()):
                try:
                    with contextlib.redirect_stdout(io.StringIO()), timeout(5):
                        value = call(self.functions[label], self.baseline(label, depth + 1))
                except BaseException:  # one that needs more than examples: the next
                    continue
                if isinstance(value, dict) and set(rule.required) <= set(value):
                    self.made[key] = value
                    break
        return self.made[key]

    def instance(self, cls, depth: int):
        if cls in self.registry:  # e.g. a Model of MODELS, a Chip of CHIPS
            return self.registry[cls]
        if cls in self.made:
            return self.made[cls]
        self.made[cls] = None
        if depth > 3:
            return None
        makers = self.producers.get(cls, ())
        if any(not m.endswith(".__init__") for m in makers):  # a record: only as the library
            makers = [m for m in makers if not m.endswith(".__init__")]  # makes it
        for label in makers:
            try:
                with contextlib.redirect_stdout(io.StringIO()), timeout(5):
                    value = call(self.functions[label], self.baseline(label, depth))
            except BaseException:  # a producer that needs more than examples: try the next
                continue
            if isinstance(value, cls):
                self.made[cls] = value
                return value
        return None

    def baseline(self, label: str, depth: int = 0) -> dict:
        """A call of ``label``: its defaults, and an example for each required parameter."""
        from tpviz.core.public import published

        fn = self.functions[label]
        spec = published(fn)
        rules = {name: rule for _, name, rule, _ in spec.checks} if spec else {}
        args = {}
        for name, p in inspect.signature(fn).parameters.items():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if name == "self" and label.endswith(".__init__"):
                continue
            if name in ("self", "cls"):
                args[name] = self.instance(_owner(self.functions, label), depth + 1)
            elif p.default is not p.empty:
                continue
            else:
                args[name] = self.of_rule(rules[name], depth, label, name) if name in rules else None
        return args


def _owner(functions, label: str):
    fn = functions[label]
    module = importlib.import_module(fn.__module__)
    return getattr(module, fn.__qualname__.split(".")[0])


def call(fn, kwargs: dict):
    """``fn`` with keyword arguments (``self`` first; a constructor through its class)."""
    kwargs = dict(kwargs)
    if fn.__name__ == "__init__":
        cls = importlib.import_module(fn.__module__)
        for part in fn.__qualname__.split(".")[:-1]:
            cls = getattr(cls, part)
        kwargs.pop("self", None)
        return cls(**kwargs)
    if "self" in kwargs:
        owner = kwargs.pop("self")
        return getattr(owner, fn.__name__)(**kwargs)
    return fn(**kwargs)


@contextlib.contextmanager
def timeout(seconds: float):
    from tpviz.core.sandbox import time_limit

    with time_limit(seconds):
        yield


def classify(fn, kwargs: dict, name: str, limit: float = LIMIT_S) -> tuple[str, str, float]:
    """(kind, message, seconds) of one call; kind: clear, result, unnamed, raw, hang, oom,
    slow."""
    from tpviz.core.exercises import ExerciseFailed
    from tpviz.core.sandbox import TimeUp
    from tpviz.errors import CheckFailed, TpvizError

    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), timeout(limit):
            call(fn, kwargs)
    except TimeUp:
        return "hang", f"still running after {limit} s", time.perf_counter() - start
    except MemoryError as e:
        return "oom", f"MemoryError: {e}"[:200], time.perf_counter() - start
    except (TpvizError, ExerciseFailed) as e:
        took = time.perf_counter() - start
        text = str(e).splitlines()[0][:300] if str(e) else ""
        if not isinstance(e, ValueError | TypeError | CheckFailed | ExerciseFailed):
            return "raw", f"{type(e).__name__} (not a ValueError or TypeError): {text}", took
        return ("slow" if took > ERROR_S else "clear"), f"{type(e).__name__}: {text}", took
    except BaseException as e:  # what the test looks for: anything that is not ours
        return "raw", f"{type(e).__name__}: {str(e)[:300]}", time.perf_counter() - start
    finally:
        _close_figures()
    return "result", "", time.perf_counter() - start


def _close_figures() -> None:
    import matplotlib.pyplot as plt

    plt.close("all")


def serve(conn) -> None:
    """The worker: answers (label, [(param, value), ...]) with an outcome per pair, sending
    ("begin", i) before each call (so that the parent can tell which one hung)."""
    import resource

    import matplotlib

    matplotlib.use("Agg")
    import tpviz

    tpviz.setup_devices(8, verbose=False)
    functions = walk()
    examples = Examples(functions)
    resource.setrlimit(resource.RLIMIT_DATA, (_data_bytes() + CAP_BYTES,
                                              resource.getrlimit(resource.RLIMIT_DATA)[1]))
    conn.send(("ready", len(functions)))
    baselines: dict[str, dict] = {}
    info: dict[str, tuple] = {}
    while True:
        request = conn.recv()
        if request is None:
            return
        label, pairs = request
        fn = functions[label]
        if label not in baselines:
            baselines[label] = examples.baseline(label)
            info[label] = _measure(fn, baselines[label])
        conn.send(("info", *info[label]))
        valid, instance, _, _, expensive = info[label]
        for i, (param, value) in enumerate(pairs):
            conn.send(("begin", i))
            if isinstance(value, Resized):
                p = inspect.signature(fn).parameters.get(param)
                default = None if p is None or p.default is p.empty else p.default
                value = value.of(baselines[label].get(param, default))
                if not isinstance(value, tuple | list):  # not a sequence: nothing to resize
                    conn.send(("done", i, "result", "", 0.0, valid))
                    continue
            kwargs = {**baselines[label], param: value}
            if not instance:  # a method with no instance to call it on
                outcome = ("noinstance", "", 0.0)
            elif expensive and _passes(fn, kwargs):  # admitted, and a valid call is slow
                outcome = ("admitted", "not run: a valid call takes more than a second", 0.0)
            else:
                outcome = classify(fn, kwargs, param)
            conn.send(("done", i, *outcome, valid))
            if len(tpviz.devices.chosen_devices()) != 8:  # a call set up other devices
                tpviz.setup_devices(8, verbose=False)


def _measure(fn, kwargs: dict) -> tuple:
    """(declared kinds admit the call, an instance exists, the call's outcome kind and message,
    whether it is expensive: longer than a second, so that only refusals are run)."""
    instance = kwargs.get("self", 0) is not None
    valid = _passes(fn, kwargs)
    if not (valid and instance):
        return valid, instance, "", "", False
    kind, message, seconds = classify(fn, kwargs, "", limit=BASELINE_S)
    return valid, instance, kind, message, seconds > 1.0 or kind == "hang"


def _passes(fn, kwargs: dict) -> bool:
    """Whether the declared kinds admit every argument of the baseline call."""
    from tpviz.core.public import check, published

    try:
        check(published(fn), (), {k: v for k, v in kwargs.items() if k != "self"}, ValueError)
    except (ValueError, TypeError):
        return False
    return True


def _data_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


class Worker:
    """The parent's side: start the worker, run calls, restart it after a hang or a crash."""

    def __init__(self):
        self.proc = self.conn = None
        self.info: dict[str, tuple] = {}

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child,), daemon=True)
        self.proc.start()
        if not self.conn.poll(300):
            raise RuntimeError("the fuzzing worker did not start in 300 s")
        self.conn.recv()

    def start_if_needed(self) -> None:
        if self.proc is None or not self.proc.is_alive():
            self.start()

    def run(self, label: str, pairs: list) -> list[tuple]:
        """The outcome of each (parameter, value) of ``pairs``: (kind, message, seconds,
        whether the other arguments were valid); ``self.info[label]`` says how the valid call
        went (see ``_measure``)."""
        self.start_if_needed()
        self.conn.send((label, pairs))
        out: list = [None] * len(pairs)
        current, began, started, dead = None, time.perf_counter(), False, False
        while None in out or not started:
            limit = (LIMIT_S + 10) if current is not None else 120
            # a pipe whose worker died polls as readable for ever: that is a death, at once
            if dead or not self.conn.poll(max(limit - (time.perf_counter() - began), 0.01)):
                kind = "hang" if not dead and self.proc.is_alive() else "oom"
                self.stop()
                if not started:  # the valid call itself hung or crashed
                    self.info[label] = (True, True, kind, "the valid call", True)
                    return [(kind, "the valid call did not end", LIMIT_S, True)] * len(pairs)
                out[current if current is not None else out.index(None)] = (
                    kind, f"worker {'stuck' if kind == 'hang' else 'died'}", LIMIT_S, True)
                rest = [j for j, o in enumerate(out) if o is None]
                if rest:
                    for j, result in zip(rest, self.run(label, [pairs[j] for j in rest]),
                                         strict=True):
                        out[j] = result
                return out
            try:
                message = self.conn.recv()
            except EOFError:
                dead = True
                continue
            if message[0] == "info":
                self.info[label], started = message[1:], True
            elif message[0] == "begin":
                current, began = message[1], time.perf_counter()
            elif message[0] == "done":
                out[message[1]] = tuple(message[2:])
            else:
                dead = True  # not a message of the worker's: treat it as dead
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.proc = None
