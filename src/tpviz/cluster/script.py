"""Run a Python script in several processes on loopback, as a launcher would on a cluster."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tpviz.cluster.launch import Launch, environment, free_port, noise
from tpviz.core.kinds import Callback, Items, Positive, Size
from tpviz.errors import ArgumentError

PROCESSES = "each process imports JAX on this one machine"


def run_script(script: str, args: Items = (), processes: Size(64, PROCESSES) = 2,
               timeout: Positive = 600.0, out: Callback = print) -> None:
    """Run ``python script *args`` in ``processes`` processes; in each, ``setup_devices(n)``
    joins the others (n / processes emulated CPU devices each). Every line a process prints
    is passed to ``out`` as ``"[process i] line"``.

    Raises:
        WorkerError: a process ended with a status other than 0 (the others are stopped).
        WorkerTimeout: still running after ``timeout`` seconds (all are stopped).
    """
    if not Path(script).is_file():
        raise ArgumentError(f"script = {script!r} is not a file; give the path of a Python "
                            f"script.")
    coordinator = f"127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory(prefix="tpviz-script-") as tmp, Launch(Path(tmp)) as run:
        for i in range(processes):
            run.start(f"process {i} of {processes}", [sys.executable, script, *args],
                      environment(processes, i, coordinator))
        def show(process, line):
            if not noise(line):  # gloo's connection notes
                out(f"[{process.name.split(' of ')[0]}] {line}")

        run.watch(timeout, show)
