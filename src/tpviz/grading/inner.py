"""The grading's inner processes, started and stopped from outside: nothing of theirs is trusted.

:func:`run` starts a command in the sandbox (:mod:`tpviz.grading.isolate`), feeds it its job on
stdin, reads its stdout line by line (at most :data:`MAX_OUTPUT` bytes: a notebook that prints
without end only cuts its own feedback) and kills it at its deadline. Every process started here
is in :data:`LIVE` until it ends, so that Ctrl-C stops them all (:func:`kill_all`).
:class:`Judge` keeps one judge process (:mod:`tpviz.grading.judge`) for the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time

MAX_OUTPUT = 96 * 2**20  # bytes of stdout read from one inner process
STDERR_KEPT = 8000  # characters of its stderr kept for the report
LIVE: set[subprocess.Popen] = set()
_LOCK = threading.Lock()


def kill_all() -> None:
    with _LOCK:
        live = list(LIVE)
    for proc in live:
        with contextlib.suppress(OSError):
            proc.kill()


def _start(sandbox, command: list[str], pass_fds=()) -> subprocess.Popen:
    proc = sandbox.popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, pass_fds=pass_fds)
    with _LOCK:
        LIVE.add(proc)
    return proc


def _forget(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()
    with _LOCK:
        LIVE.discard(proc)


def run(sandbox, command: list[str], job: bytes, seconds: float, on_line=None,
        pass_fds=()) -> tuple[int | None, str, bool]:
    """Run ``command`` inside with ``job`` on stdin; call ``on_line(bytes)`` for each line of its
    stdout. Returns its exit code (None: killed at the deadline), the end of its stderr, and
    whether its output was cut at :data:`MAX_OUTPUT`."""
    proc = _start(sandbox, command, pass_fds)
    tail, cut = [""], [False]

    def feed():
        with contextlib.suppress(OSError):
            proc.stdin.write(job)
            proc.stdin.close()

    def errors():
        for chunk in iter(lambda: proc.stderr.read(4096), b""):
            tail[0] = (tail[0] + chunk.decode(errors="replace"))[-STDERR_KEPT:]

    def lines():
        total = 0
        for line in proc.stdout:
            total += len(line)
            if total > MAX_OUTPUT:
                cut[0] = True
                proc.kill()
                return
            if on_line is not None:
                on_line(line)

    threads = [threading.Thread(target=t, daemon=True) for t in (feed, errors, lines)]
    for t in threads:
        t.start()
    try:
        code = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        _forget(proc)
    for t in threads:
        t.join(5)
    return code, tail[0], cut[0]


class Judge:
    """One judge process for the whole run (it never runs a learner's code), started on first
    use and again if it died; one request at a time."""

    def __init__(self, sandbox, seconds: float):
        self.sandbox, self.seconds = sandbox, seconds
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def __call__(self, checker: str, args: list, kwargs: dict) -> tuple[str, str]:
        request = json.dumps({"checker": checker, "args": args, "kwargs": kwargs}) + "\n"
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.close()
                self.proc = _start(self.sandbox, [sys.executable, "-m", "tpviz.grading.judge"])
                os.set_blocking(self.proc.stdout.fileno(), True)
                threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
            reply = self._ask(request.encode())
        if reply is None:
            return "wrong", "✗ your answer could not be judged in time (the judge was restarted)"
        return reply["status"], reply["message"]

    @staticmethod
    def _drain(proc) -> None:
        for _ in iter(lambda: proc.stderr.read(4096), b""):
            pass

    def _ask(self, request: bytes) -> dict | None:
        box: dict = {}

        def talk():
            try:
                self.proc.stdin.write(request)
                self.proc.stdin.flush()
                box["line"] = self.proc.stdout.readline()
            except OSError:
                pass

        t = threading.Thread(target=talk, daemon=True)
        start = time.monotonic()
        t.start()
        t.join(self.seconds)
        if not box.get("line") or time.monotonic() - start > self.seconds:
            self.close()
            return None
        return json.loads(box["line"])

    def close(self) -> None:
        if self.proc is not None:
            _forget(self.proc)
            self.proc = None
