"""Start processes on this machine, watch them, and never leave one behind.

Each process starts in its own session (its own process group), so that stopping it stops
whatever it started too: :meth:`Launch.stop` sends the group SIGTERM, then SIGKILL. A process
that dies (exit status other than 0 or ``ok``), or a run past its deadline, stops them all and
raises :class:`~tpviz.errors.WorkerError` (or :class:`~tpviz.errors.WorkerTimeout`) naming the
process, the last thing it reported and the end of its error output.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tpviz.distributed import ENV
from tpviz.errors import WorkerError, WorkerTimeout

NOISE = ("W0000", "I0000", "E0000", "[Gloo]", "WARNING: All log messages before absl")


def noise(line: str) -> bool:
    """A routine log line of JAX or gloo (gloo's may come interleaved with another)."""
    return line.lstrip().startswith(NOISE) or "connected peer ranks" in line


def free_port() -> int:
    """A TCP port nobody listens on now (the operating system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(processes: int | None = None, process_id: int | None = None,
                coordinator: str | None = None) -> dict[str, str]:
    """This process's environment for a child: with ``processes``, the variables that make its
    ``setup_devices`` join the others; without, none of them (one process)."""
    env = {k: v for k, v in os.environ.items() if k not in ENV.values()}
    if processes is not None:
        env.update({ENV["processes"]: str(processes), ENV["process_id"]: str(process_id),
                    ENV["coordinator"]: coordinator})
    return env


@dataclass
class Process:
    """One started process: its name ("process 1 of 2"), the Popen, its error log."""

    name: str
    popen: subprocess.Popen
    log: Path
    last: str = "nothing yet"  # the last line it printed

    def tail(self, lines: int = 6) -> str:
        """The end of its error output, without JAX's and gloo's routine log lines."""
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        kept = [t for t in text if t.strip() and not noise(t)
                and not t.lstrip().startswith("@ ")]
        return "\n".join(kept[-lines:])


@dataclass
class Launch:
    """Processes started together; use as a context manager so that they are stopped."""

    logs: Path
    ok: tuple[int, ...] = (0,)  # exit statuses that are not a failure of the process
    processes: list[Process] = field(default_factory=list)
    lines: queue.Queue = field(default_factory=queue.Queue)

    def start(self, name: str, command: list[str], env: dict[str, str]) -> Process:
        log = self.logs / f"{name.replace(' ', '-')}.log"
        popen = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log.open("w"),
                                 stdin=subprocess.DEVNULL, env=env, text=True,
                                 start_new_session=True)
        process = Process(name, popen, log)
        self.processes.append(process)
        threading.Thread(target=self._read, args=(process,), daemon=True).start()
        return process

    def _read(self, process: Process) -> None:
        for line in process.popen.stdout:
            self.lines.put((process, line.rstrip("\n")))

    def watch(self, timeout: float, on_line=None) -> None:
        """Wait until every process ends, passing each line printed to ``on_line(process,
        line)``.

        Raises:
            WorkerError: a process ended with a status not in ``ok`` (the others are stopped).
            WorkerTimeout: ``timeout`` seconds passed (all are stopped).
        """
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(queue.Empty):
                while True:
                    process, line = self.lines.get(timeout=0.2)
                    process.last = line
                    if on_line:
                        on_line(process, line)
            for p in self.processes:
                status = p.popen.poll()
                if status is not None and status not in self.ok:
                    self.stop()
                    how = (f"was killed by signal {-status}" if status < 0
                           else f"exited with status {status}")
                    raise WorkerError(f"{p.name} {how}; its last report: {p.last!r}. "
                                      f"The end of its error output ({p.log}):\n{p.tail()}")
            if all(p.popen.poll() is not None for p in self.processes) and self.lines.empty():
                return
            if time.monotonic() > deadline:
                running = [p for p in self.processes if p.popen.poll() is None]
                self.stop()
                raise WorkerTimeout(
                    f"{', '.join(p.name for p in running)} still running after {timeout:g} s "
                    f"(stopped); last reports: "
                    + "; ".join(f"{p.name}: {p.last!r}" for p in running)
                    + ". A collective waiting for a process that never comes looks like this; "
                    "give more time with --timeout.")

    def stop(self) -> None:
        """Stop every process still running, with everything it started (its process group)."""
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            alive = [p for p in self.processes if p.popen.poll() is None]
            for p in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.popen.pid, sig)
            for p in alive:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.popen.wait(wait)

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
