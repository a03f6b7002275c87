"""Run every topic's check in one process and across processes, and compare the two.

``python -m tpviz.cluster --processes 2 --devices-per-process 4`` starts, on this machine,

- one process with all 8 devices (the single-process run), and
- 2 processes of 4 CPU devices each, joined by ``jax.distributed`` over loopback with gloo
  between them (the cross-process run: every mesh spans both processes),

runs in each the check every chapter runs (:mod:`tpviz.cluster.topics`), and prints one line
per topic: ``equal`` when the cross-process run passed its own check, its values equal the
single-process run's and its compiled programs hold the same collectives (and the same memory
per device); else what differs. It exits 0 only when every topic is equal.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tpviz.cluster import compare
from tpviz.cluster.launch import Launch, environment, free_port, noise
from tpviz.cluster.script import PROCESSES
from tpviz.core.kinds import Callback, Devices, Positive, Size
from tpviz.core.validate import choice

TOPICS = ("layouts", "collectives", "matmul", "megatron", "zero", "mesh2d", "pipeline",
          "asyncpipe", "context", "moe", "together", "autoshard", "inference")


@dataclass(frozen=True)
class Verdict:
    """One topic: equal or not, why, and how long each run took (seconds)."""

    topic: str
    equal: bool
    why: str
    seconds: float  # the cross-process run (process 0's clock)
    one_seconds: float  # the single-process run
    difference: float  # the largest relative difference of the values compared
    programs: int  # collectives compared (of every compiled program the checks read)
    cpu_seconds: float = float("nan")  # CPU time of process 0 in the cross-process run

    def line(self) -> str:
        timing = (f"{self.seconds:6.1f} s ({self.cpu_seconds:5.1f} s of CPU) across processes, "
                  f"{self.one_seconds:6.1f} s in one")
        if self.equal:
            return (f"{self.topic:12s} equal      {timing}; values within "
                    f"{self.difference:.0e}, {self.programs} compiled collectives the same")
        return f"{self.topic:12s} DIFFERS    {timing}; {self.why}"


def _load(folder: Path, topic: str) -> tuple[dict | None, list[np.ndarray]]:
    path = folder / f"{topic}.json"
    if not path.exists():
        return None, []
    with np.load(folder / f"{topic}.npz") as values:
        arrays = [values[f"arr_{i}"] for i in range(len(values.files))]
    return json.loads(path.read_text()), arrays


def _count_collectives(d) -> int:
    if isinstance(d, dict):
        return int("collective" in d) + sum(_count_collectives(v) for v in d.values())
    if isinstance(d, list):
        return sum(_count_collectives(v) for v in d)
    return 0


def judge(topic: str, one: Path, many: list[Path]) -> Verdict:
    """Compare a topic's results: ``one`` the single-process run's folder, ``many`` each
    process's folder of the cross-process run."""
    (a, values_a), (b, values_b) = _load(one, topic), _load(many[0], topic)
    seconds = (b or {}).get("seconds", float("nan"))
    one_seconds = (a or {}).get("seconds", float("nan"))

    def verdict(why: str, diff: float = float("nan")) -> Verdict:
        count = _count_collectives((b or {}).get("digest"))
        return Verdict(topic, not why, why, seconds, one_seconds, diff, count,
                       (b or {}).get("cpu_seconds", float("nan")))

    if a is None or b is None:
        return verdict(f"no result from the {'single' if a is None else 'cross'}-process run")
    if a["error"]:
        return verdict(f"the single-process check failed: {a['error']}")
    if b["error"]:
        return verdict(f"the cross-process check failed: {b['error']}")
    found = compare.differences(a["digest"], b["digest"])
    if found:
        return verdict(f"{len(found)} difference(s) in what was measured, first: {found[0]}")
    diff, why = compare.value_difference(values_a, values_b)
    if why or diff > compare.TOLERANCE:
        return verdict(why or f"values differ by {diff:.1e} (tolerance "
                              f"{compare.TOLERANCE:.0e})", diff)
    for k, folder in enumerate(many[1:], start=1):  # every process must have seen the same
        c, values_c = _load(folder, topic)
        if c is None or compare.differences(b["digest"], c["digest"]) or \
                compare.value_difference(values_b, values_c)[0] > 0:
            return verdict(f"process {k} measured something else than process 0", diff)
    return verdict("", diff)


def run_checks(processes: Size(64, PROCESSES) = 2, devices_per_process: Devices = 4,
               topics: tuple[str, ...] = TOPICS, timeout: Positive = 900.0,
               progress: Callback | None = None) -> list[Verdict]:
    """Run ``topics`` in one process and across ``processes`` (each of ``devices_per_process``
    CPU devices) at the same time, on loopback, and judge each topic.

    Raises:
        WorkerError, WorkerTimeout: a process died or the run took longer than ``timeout``.
    """
    for i, topic in enumerate(topics):
        choice(f"topics[{i}]", topic, TOPICS)
    devices = processes * devices_per_process
    with tempfile.TemporaryDirectory(prefix="tpviz-cluster-") as tmp, Launch(Path(tmp)) as run:
        tmp = Path(tmp)
        coordinator = f"127.0.0.1:{free_port()}"
        run.ok = (0, 1)  # 1: a check failed; its result says which

        def worker(name, out, env):
            command = [sys.executable, "-m", "tpviz.cluster.worker", "--devices", str(devices),
                       "--out", str(out), "--topics", ",".join(topics),
                       "--timeout", str(min(timeout, 120.0))]
            run.start(name, command, env)

        worker("one process", tmp / "one", environment())
        for i in range(processes):
            worker(f"process {i} of {processes}", tmp / f"p{i}",
                   environment(processes, i, coordinator))

        shown = ("one process", f"process 0 of {processes}")

        start = time.perf_counter()

        def on_line(process, line):  # "[  41 s] process 0 of 2   done matmul (3 of 12): ..."
            if progress and not noise(line) and process.name in shown:
                progress(f"  [{time.perf_counter() - start:5.0f} s] {process.name:16s} {line}")

        run.watch(timeout, on_line)
        if progress:
            progress(f"  both runs ended after {time.perf_counter() - start:.1f} s")
        return [judge(t, tmp / "one", [tmp / f"p{i}" for i in range(processes)])
                for t in topics]
