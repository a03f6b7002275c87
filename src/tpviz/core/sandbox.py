"""Time limits for a learner's code that the learner's code cannot switch off.

:func:`run_limited` runs a function in a worker thread and waits for it at most a given time.
Python code that runs too long (a ``while True``, an ``__eq__`` that never returns) is stopped by
raising :class:`TimeUp` inside the worker; compiled code that never ends (a ``jax.lax.while_loop``
whose condition stays true) cannot be stopped by anything short of ending the process, so the
worker is left running in the background and :class:`StillRunning` is raised: the notebook, or
the grading kernel, goes on. Nothing here uses the process's interval timer or ``SIGALRM``, so a
learner who resets them changes nothing.

:func:`time_limit` is the per-call limit used by the checker framework: a ``SIGALRM`` timer in
the main thread (Jupyter, pytest), the same stop-by-exception in a worker thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
import time
from collections.abc import Callable, Iterator

GRACE_S = 2.0  # after a stop is raised, how long the worker has to reach Python and stop


class TimeUp(BaseException):
    """Raised inside code that ran past its limit (a ``BaseException``: ``except Exception`` in
    the learner's code cannot swallow it by accident)."""


class StillRunning(BaseException):
    """The worker ran past its limit inside compiled code and could not be stopped."""


def _raise_in(thread: threading.Thread, error: type[BaseException]) -> None:
    """Ask ``thread`` to raise ``error`` at its next Python instruction."""
    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(error))


def run_limited(fn: Callable, *args, seconds: float, **kwargs):
    """``fn(*args, **kwargs)`` in a worker thread, at most ``seconds`` long.

    Returns its result or raises its exception (``SystemExit`` included, as an ordinary
    exception of this thread).

    Raises:
        TimeUp: it ran too long and was stopped.
        StillRunning: it ran too long inside compiled code; it goes on in the background.
    """
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:
            box["error"] = e

    worker = threading.Thread(target=target, name="tpviz-learner-code", daemon=True)
    worker.start()
    try:
        worker.join(seconds)
    except BaseException:  # KeyboardInterrupt (the notebook's stop button): stop it too
        _raise_in(worker, KeyboardInterrupt)
        worker.join(GRACE_S)
        raise
    if worker.is_alive():
        _raise_in(worker, TimeUp)
        worker.join(GRACE_S)
        if worker.is_alive():
            raise StillRunning
    error = box.get("error")
    if error is not None:
        raise error.with_traceback(error.__traceback__)
    return box.get("value")


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`TimeUp` in the block after ``seconds``: a ``SIGALRM`` timer in the main
    thread (restoring an outer timer afterwards), a stop-by-exception in any other thread."""
    if threading.current_thread() is not threading.main_thread():
        with _thread_time_limit(seconds):
            yield
        return
    if not hasattr(signal, "setitimer"):  # Windows: no limit in the main thread
        yield
        return

    def expire(*_):
        raise TimeUp

    previous = signal.signal(signal.SIGALRM, expire)
    start = time.monotonic()
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # an outer limit was running: give it back what is left (at least a tick)
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))


@contextlib.contextmanager
def _thread_time_limit(seconds: float) -> Iterator[None]:
    me = threading.current_thread()
    lock, state = threading.Lock(), {"inside": True}

    def expire():
        with lock:
            if state["inside"]:
                _raise_in(me, TimeUp)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["inside"] = False
        timer.cancel()
