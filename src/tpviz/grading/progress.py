"""A progress bar with the time left, on stderr: one line redrawn on a terminal, a line per
submission elsewhere (a log, CI)."""

from __future__ import annotations

import sys
import threading
import time

WIDTH = 30


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """``step(line)`` once per finished submission; ``kept`` ones (from the cache) do not count
    towards the time per submission."""

    def __init__(self, total: int, workers: int, stream=None):
        self.total, self.workers = total, max(1, workers)
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.done = self.graded = 0
        self.start = time.monotonic()
        self.lock = threading.Lock()

    def bar(self) -> str:
        done = self.done / self.total if self.total else 1.0
        fill = int(WIDTH * done)
        elapsed = time.monotonic() - self.start
        if self.graded and self.done < self.total:
            left = f"about {_clock(elapsed / self.graded * (self.total - self.done))} left"
        else:
            left = "estimating the time left" if self.done < self.total else "done"
        return (f"[{'#' * fill}{'.' * (WIDTH - fill)}] {self.done}/{self.total} "
                f"{_clock(elapsed)} elapsed, {left}")

    def step(self, line: str, kept: bool = False) -> None:
        with self.lock:
            self.done += 1
            self.graded += not kept
            if self.tty:
                self.stream.write(f"\r\x1b[K{line}\n{self.bar()}")
            else:
                self.stream.write(f"{line}\n{self.bar()}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
