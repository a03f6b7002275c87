"""A function answer, checked with the checker first and the learner's code inside its call.

:func:`run` runs in a fresh fork of the submission's function-check process
(:mod:`tpviz.grading.fnserve`, in the submission's sandbox), one fork per exercise. It gets the
job (:mod:`tpviz.grading.capture` wrote its parts: the check call's plain values, the
expressions naming the learner's functions, the source of the answer cells and what that source
reads from the notebook), sets up the devices, loads the checker, and only then calls the
checker with stand-ins for the learner's functions. The learner's source is executed when the
checker first calls one of them, so the learner's code runs only inside the checker's call (an
answer that is not a function, such as a dict of PyTorch placement objects, is made from its
source just before the call).

While the learner's code runs, an audit hook (:func:`sys.addaudithook`, which cannot be removed)
refuses what would reach the checker or the grading: frames (``sys._getframe``, ``tb_frame``),
``gc``'s object lists, ``ctypes``, tracing, signals, new processes, threads and sockets,
rewriting classes or code objects, making links, and opening ``/proc`` under any spelling
(:func:`_reaches_proc`). Afterwards the library's modules are compared with what they
held before (a function the learner replaced makes the check fail), and the verdict is written
once, with the key the grading process gave, on a pipe of its own; a second line, or a line
without the key, scores 0. :doc:`instructors` says what remains possible.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import os
import signal
import sys

REFUSED = ("ctypes.", "gc.get_", "sys._getframe", "sys._current_frames", "sys.settrace",
           "sys.setprofile", "os.kill", "os.killpg", "signal.pthread_kill", "os.system",
           "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "subprocess.", "socket.",
           "_thread.start_new_thread", "os.putenv", "os.unsetenv",
           "os.symlink", "os.link")  # no link made between the /proc test and the open
FRAMES = ("tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back")
WATCHED = ("tpviz", "jax", "jaxlib", "numpy", "builtins", "math", "operator", "functools",
           "contextlib", "io", "json", "os", "sys")


def _reaches_proc(path, folder_too: bool) -> bool:
    """Whether opening ``path`` could reach ``/proc`` (the process's memory, and through
    ``/proc/self/fd`` the verdict's pipe): however it is spelt (``//proc``, ``/./proc``,
    ``../proc``), through links (``/dev/fd``, a link to it), or by a descriptor. With
    ``folder_too`` (``os.open``), a folder too: a descriptor of ``/`` would open
    ``proc/self/mem`` relative to it (``dir_fd``, which the audit event does not show)."""
    if isinstance(path, int):
        return True
    try:
        path = os.fsdecode(path)
        spelt, real = os.path.normpath(os.path.abspath(path)), os.path.realpath(path)
    except (TypeError, ValueError):  # not a path, or a NUL in it
        return True
    # /dev/fd/N and /dev/stdin resolve to the file open there, not to /proc: the spelling counts
    return (any(p == "/proc" or p.startswith(("/proc/", "/dev/fd", "/dev/std"))
                for p in (spelt, real)) or (folder_too and os.path.isdir(real)))


def _guard() -> contextlib.AbstractContextManager:
    """A context manager: inside it, the audit hook refuses (see the module's docstring)."""
    depth = [0]

    def hook(event: str, args: tuple) -> None:
        if not depth[0]:
            return
        refused = event.startswith(REFUSED)
        if event == "object.__getattr__" and args[1] in FRAMES:
            refused = True
        if event in ("object.__setattr__", "object.__delattr__") and (
                isinstance(args[0], type) or args[1] in ("__code__", "__defaults__",
                                                          "__kwdefaults__")):
            refused = True
        if event == "open" and _reaches_proc(args[0], folder_too=args[1] is None):
            refused = True
        if refused:
            raise RuntimeError(f"not allowed while an answer is graded: {event}")

    sys.addaudithook(hook)

    @contextlib.contextmanager
    def learner():
        depth[0] += 1
        try:
            yield
        finally:
            depth[0] -= 1

    return learner


def _snapshot() -> dict:
    return {name: dict(vars(m)) for name, m in list(sys.modules.items())
            if m is not None and name.split(".")[0] in WATCHED}


def _learners(value) -> bool:
    """Whether ``value`` was made by the learner's code (defined in the answer, or an instance of
    a class defined there)."""
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    return (getattr(code, "co_filename", "").startswith("<your")
            or type(value).__module__ == "__main__"
            or getattr(value, "__module__", None) == "__main__")


def _replaced(old, new) -> bool:
    """Whether ``new`` took the place of ``old``: something the learner's code made, or any
    other object put where a function, class or module was (a ``MagicMock``, a ``partial``, a
    namespace standing in for ``jax.lax``). The library's own lazy set-up changes flags and
    caches, never its functions (seen: two booleans of JAX's compilation cache)."""
    if new is old:
        return False
    if _learners(new):
        return True
    import inspect

    return inspect.isroutine(old) or inspect.isclass(old) or inspect.ismodule(old)


def _changed(before: dict) -> list[str]:
    """Names in the library's modules that now hold something else where the learner's code
    could have put it (:func:`_replaced`)."""
    out = []
    for name, saved in before.items():
        now = vars(sys.modules[name]) if name in sys.modules else {}
        out += [f"{name}.{k}" for k, v in saved.items() if _replaced(v, now.get(k, v))]
    return out


DEPTH, ITEMS = 4, 256  # how far into the library's data the snapshot looks


def _parts(value) -> list | None:
    """What ``value`` holds, by reference, where code could change it in place: a dict's
    values by key, a list's or tuple's items, an object's attributes (a frozen dataclass too,
    which ``object.__setattr__`` changes). None for what cannot change (numbers, strings)."""
    import inspect

    if isinstance(value, (str, bytes, int, float, complex, bool, type(None))):
        return None
    if inspect.isroutine(value) or inspect.isclass(value) or inspect.ismodule(value):
        return None  # rebinding these is :func:`_changed`'s; their insides are code
    if isinstance(value, dict):
        return [(k, v) for k, v in list(value.items())[:ITEMS]]
    if isinstance(value, (list, tuple)):
        return list(enumerate(value[:ITEMS]))
    attributes = getattr(value, "__dict__", None)
    if type(value).__module__.startswith("tpviz") and isinstance(attributes, dict):
        return list(attributes.items())[:ITEMS]
    return None


def _state() -> list:
    """The library's data (``tpviz``'s module-level values and what they hold, a few levels
    deep), each part kept by reference, so that a change in place shows: the checkers'
    declarations (a ``Build``'s cases and expected collectives), the hardware tables."""
    out, seen = [], set()

    def walk(value, depth):
        parts = _parts(value)
        if parts is None or id(value) in seen:
            return
        seen.add(id(value))
        out.append((value, parts))
        if depth < DEPTH:
            for _, part in parts:
                walk(part, depth + 1)

    for name, module in list(sys.modules.items()):
        if module is not None and name.split(".")[0] == "tpviz":
            for key, value in list(vars(module).items()):
                if not key.startswith("__"):
                    walk(value, 0)
    return out


def _changed_in_place(before: list) -> list[str]:
    """The library's data changed since :func:`_state` (a part now another object; new keys
    of a dict, items appended to a list, attributes added, as caches do, are allowed)."""
    out = []
    for value, parts in before:
        now = dict(_parts(value) or [])
        for key, part in parts:
            if key not in now or now[key] is not part:
                out.append(f"{type(value).__name__}[{key!r}]")
                break
    return out


class Answer:
    """The learner's answer cells, executed once, when first needed, under the guard."""

    def __init__(self, job: dict, learner):
        self.job, self.learner, self.ns = job, learner, None
        self.missing: dict[str, str] = {}

    def namespace(self) -> dict:
        if self.ns is None:
            ns = {"__name__": "__main__", "__builtins__": builtins}
            with self.learner():
                self._fill(ns, self.job.get("context", {}))
                exec(compile(self.job["source"], "<your answer>", "exec"), ns)
            self.ns = ns
        return self.ns

    def _fill(self, ns: dict, context: dict) -> None:
        from tpviz.grading.plain import decode

        for name, d in context.items():
            if "module" in d:
                ns[name] = importlib.import_module(d["module"])
            elif "value" in d:
                ns[name] = decode(d["value"])
            elif "ref" in d:
                found = importlib.import_module(d["ref"][0])
                for part in d["ref"][1].split("."):
                    found = getattr(found, part)
                ns[name] = found
            elif "source" in d:  # a function or class of another cell of the learner's
                self._fill(ns, d.get("context", {}))
                exec(compile(d["source"], f"<your {name}>", "exec"), ns)
            else:
                self.missing[name] = d.get("missing", "object")

    def value(self, expr: str, is_function: bool):
        if not is_function:
            return eval(expr, self.namespace())
        answer = self

        def your_function(*args, **kwargs):
            fn = eval(expr, answer.namespace())
            with answer.learner():
                return fn(*args, **kwargs)

        your_function.__name__ = your_function.__qualname__ = (
            expr if expr.isidentifier() else "your_function")
        return your_function


def run(job: dict) -> tuple[str, str]:
    os.environ["TPVIZ_GRADING"] = "1"
    import tpviz
    import tpviz.exercises

    tpviz.setup_devices(8, verbose=False)
    check = getattr(tpviz.exercises, job["checker"])  # the checker is loaded first
    from tpviz.grading.judge import verdict
    from tpviz.grading.plain import decode

    learner = _guard()
    answer = Answer(job, learner)
    before, state = _snapshot(), _state()
    try:
        def one(spec):
            if "value" in spec:
                return decode(spec["value"])
            if "code" in spec:
                return answer.value(spec["code"], spec.get("callable", False))
            raise NameError(spec.get("error", "no answer"))

        args = [one(s) for s in job["args"]]
        kwargs = {k: one(s) for k, s in job["kwargs"].items()}
    except BaseException as e:  # the answer could not be made: the exercise scores 0
        return "wrong", f"✗ your answer could not be read: {type(e).__name__}: {e}"
    status, message = verdict(check, args, kwargs)
    for sig in (signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF):  # nothing left to fire
        signal.signal(sig, signal.SIG_IGN)
    for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
        signal.setitimer(timer, 0)
    changed = _changed(before) + _changed_in_place(state)
    if changed:
        return "wrong", ("✗ your code replaced part of the library while it was checked "
                         f"({', '.join(changed[:3])}); this check does not count.")
    if status != "ok" and answer.missing and "NameError" in message:
        message += ("\n  Note: " + ", ".join(f"{n} (a {t})" for n, t in answer.missing.items())
                    + " come(s) from another cell and cannot be carried to the grader; define "
                    "it in your answer cell.")
    return status, message
