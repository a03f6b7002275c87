"""A submission's function answers, each checked in a fresh fork of one warm process.

``python -P -m tpviz.grading.fnserve [--many] [check_name ...]`` runs in a sandbox of its own,
one per submission. It imports tpviz and the named checkers once (about 1 s of CPU, which a
fresh process per exercise paid each time), sets no devices up and runs none of the learner's
code. For each job line on stdin it forks a child that is exactly that clean process: the child
sets the devices up, checks the answer (:func:`tpviz.grading.fnrun.run`: the checker first, the
learner's code inside its call, under the audit hook) and writes its verdict, with the job's
key, on a pipe of its own. The parent (trusted code only) reads that pipe until the child ends or
its deadline passes, then kills the child and everything else in the sandbox and empties its
``/tmp`` and ``/dev/shm``, and only then answers one line on stdout: ``{"verdict": the child's
text, "timed_out": bool, "errors": the end of its output, "more": whether it takes another
job}``. The grading process accepts the verdict only with the key (:mod:`tpviz.grading.jobs`).

So each exercise starts from the same state as a fresh process would: its child never sees
another exercise's key, job or channel (it closes stdin and the reply channel first), nothing an
earlier exercise started or wrote is left, and the parent cannot be read or traced by its
children (it is not dumpable). An endless compiled loop costs its own exercise: the child is
killed at the deadline and the next one is a new fork. With ``--many`` missing, or outside a
sandbox of its own (it must be the second process of a fresh process namespace), it checks one
job and exits: the grading process then starts one process per exercise.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import sys
import time
import warnings

MAX_VERDICT = 1 << 20  # bytes read from a child's verdict pipe
ERRORS_KEPT = 2000  # characters of a child's output sent back
SWEEPS = 200  # tries to see the sandbox empty of other processes (about 1 s)


def _dumpable(on: bool) -> bool:
    """Make this process dumpable or not (``prctl(PR_SET_DUMPABLE)``): a process that is not
    cannot be traced, nor its memory or files read through ``/proc``, by others of its user."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, int(on), 0, 0, 0) == 0 and libc.prctl(3, 0, 0, 0, 0) == int(on)
    except (OSError, AttributeError):
        return False


def _private() -> bool:
    """Whether this process may serve many jobs: the first process under bubblewrap's init in a
    process namespace of its own, and not dumpable."""
    return os.getpid() == 2 and os.getppid() == 1 and _dumpable(False)


def _child(job: dict, key: str, write: int, closes: list[int], log: str) -> None:
    """In the fork: cut the ways to the parent, check the answer, write the verdict, exit."""
    try:
        for fd in closes:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        _dumpable(True)  # its own /proc files are its own again (nothing else runs now)
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # the first process the system kills when memory runs out
        from tpviz.grading.fnrun import run

        status, message = run(job)
        os.write(write, (json.dumps({"key": key, "status": status, "message": message[:4000]})
                         + "\n").encode())
    finally:
        os._exit(0)  # no exit handlers, no finalizers of the learner's objects


def _read(fd: int, seconds: float) -> tuple[bytes, bool]:
    """What the child wrote on its verdict pipe until it closed (or the deadline: True)."""
    data, deadline = b"", time.monotonic() + seconds
    while len(data) < MAX_VERDICT:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return data, True
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data, False


def check(job: dict, replies) -> dict:
    """Fork a child for one job and wait for its verdict; kill the child afterwards."""
    key, seconds = job.pop("key"), float(job.pop("seconds"))
    log = os.path.join(os.environ.get("TMPDIR", "/tmp"), "fnrun.log")
    read, write = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns of threads (NumPy's BLAS): harmless
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        _child(job, key, write, [read, replies.fileno()], log)
    os.close(write)
    try:
        data, late = _read(read, seconds)
    finally:
        os.close(read)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    try:
        with open(log, errors="replace") as f:
            errors = f.read()[-ERRORS_KEPT:]
    except OSError:
        errors = ""
    return {"verdict": data.decode(errors="replace"), "timed_out": late, "errors": errors}


def clean() -> bool:
    """Kill every other process of the sandbox and empty its writable folders; False if the
    sandbox could not be made clean (the caller then stops)."""
    me = os.getpid()
    for _ in range(SWEEPS):
        others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not others:
            break
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)  # every process of this namespace but init and this one
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        time.sleep(0.005)
    else:
        return False
    for top in ("/tmp", "/dev/shm"):
        for name in os.listdir(top):
            path = os.path.join(top, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, onerror=_writable)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        if os.listdir(top):
            return False
    os.makedirs(os.environ.get("HOME", "/tmp/home"))
    os.chdir(os.environ.get("HOME", "/tmp/home"))
    return True


def _writable(function, path, _exc) -> None:
    """rmtree's error handler: a folder the learner made read-only is made writable again."""
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        function(path)


def main(argv: list[str]) -> None:
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"  # no thread pools in the process that forks
    os.environ["TPVIZ_GRADING"] = "1"
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints go to stderr
    many = "--many" in argv and _private()
    import tpviz.exercises

    for name in argv:
        if name.startswith("check_"):
            getattr(tpviz.exercises, name, None)  # import the checker's module once
    for line in sys.stdin:
        reply = check(json.loads(line), replies)
        try:  # the sandbox is clean before the answer is sent
            reply["more"] = many and clean()
        except OSError:
            reply["more"] = False
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        if not reply["more"]:
            break


if __name__ == "__main__":
    main(sys.argv[1:])
