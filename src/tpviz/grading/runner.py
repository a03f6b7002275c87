"""Inside a submission's sandbox: run the notebook, and write its answers out as plain data.

``python -m tpviz.grading.runner`` reads one job on stdin (the notebook, prepared by
:mod:`tpviz.grading.prepare`: the check cells are the release's; and for each exercise the check
call's arguments and the source of its answer cells) and runs the notebook in a fresh kernel
(nbclient). A check cell is never run: in its place the kernel writes the check call's arguments
out (:func:`tpviz.grading.capture.export`), and they are judged outside the sandbox. Events go to
stdout as JSON lines, each as soon as it is known (a submission that kills its own runner keeps
what was sent before)::

    {"answer": "ex5_2", "data": {...}}       one per exercise
    {"timed_out": "ex5_3"}                   a cell of that exercise ran past the timeout
    {"notebook": {...}}                      the executed notebook, last

A cell that runs past the timeout is interrupted; a kernel stuck in compiled code (it ignores
the interrupt) or dead is restarted and the cells before replayed, and the rest is graded. The
cells after the last check cell are not run: nothing after it is graded.

It is started as a script (``python -P .../runner.py``), not as ``-m tpviz.grading.runner``:
it needs nothing of tpviz, whose package would import JAX and matplotlib (about 1 s of CPU)
for every submission. The grading's warm-up runs the release through it too
(:mod:`tpviz.grading.warm`).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time

# jsonschema, which nbformat imports, builds a grammar for IRIs at import when rfc3987_syntax is
# installed (about 1 s of CPU, for every submission); notebooks hold no IRIs to validate.
sys.modules.setdefault("rfc3987_syntax", None)

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402
from nbclient.exceptions import CellTimeoutError, DeadKernelError  # noqa: E402
from nbclient.util import run_sync  # noqa: E402
from nbformat import NotebookNode  # noqa: E402

PROBE_S = 10  # after a timeout: how long a kernel that survived the interrupt has to answer
TIMEOUT_NAME = "CellTimeoutError"
ANSWERS = os.path.join(os.environ.get("TMPDIR", "/tmp"), "answers")  # inside the sandbox
MAX_TEXT = 20_000  # characters of one output kept for the feedback page
MAX_IMAGE = 2 * 2**20


def poll_in_slices(seconds: float = 1.0) -> None:
    """Make the kernel client's channels wait for a message in slices of ``seconds``.

    nbclient waits for a cell's reply with one ``poll`` of the shell socket for the whole cell
    time limit (and of the iopub socket with no limit). Now and then the poll misses its
    socket's wake-up (zmq signals readiness on an edge; nbclient issue #312 reports the same
    hang with widgets): the reply sits unread until the limit ends. Chapter 02 run 20 times,
    two at a time, with a 20-s limit: 3 runs took 25-26 s instead of 5, the reply read at the
    limit; in `make test` (150-s limit) whole chapters stalled so, client and kernel idle
    (py-spy). A fresh poll first asks the socket whether a message waits, so polling in slices
    reads such a reply within a slice (40 runs so: none over 9.1 s); the limit is kept.
    """
    from queue import Empty
    from time import monotonic

    channel = async_channel()
    whole = channel.get_msg

    async def get_msg(self, timeout: float | None = None):
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            left = seconds if deadline is None else max(0.0, deadline - monotonic())
            try:
                return await whole(self, timeout=min(seconds, left))
            except Empty:
                if deadline is not None and monotonic() >= deadline:
                    raise

    channel.get_msg = get_msg


def async_channel() -> type:
    """The kernel client's asynchronous channel class, which nbclient reads replies with:
    ``AsyncZMQSocketChannel`` (jupyter_client 8), ``ZMQSocketChannel`` before (7, Colab's)."""
    from jupyter_client import channels

    return getattr(channels, "AsyncZMQSocketChannel", None) or channels.ZMQSocketChannel


class Runner:
    def __init__(self, job: dict, send):
        self.nb = nbformat.reads(json.dumps(job["notebook"]), as_version=4)  # joined lines
        self.exercises = {e["index"]: e for e in job["exercises"]}
        self.timeout = int(job["timeout"])
        self.send = send
        self.client = NotebookClient(
            self.nb, timeout=self.timeout, kernel_name="python3", allow_errors=True,
            interrupt_on_timeout=True, startup_timeout=120, record_timing=False,
            error_on_timeout={"ename": TIMEOUT_NAME, "evalue": "the cell ran past the timeout",
                              "traceback": [f"{TIMEOUT_NAME}: the cell ran past the timeout"]},
            resources={"metadata": {"path": os.getcwd()}})
        self.ran: list[int] = []  # cells that finished: replayed after a restart
        self.late = False  # a cell timed out since the last check: charged to the next one

    def run(self) -> None:
        os.makedirs(ANSWERS, exist_ok=True)
        last = max(self.exercises, default=len(self.nb.cells))
        with self.client.setup_kernel():
            for index, cell in enumerate(self.nb.cells[:last + 1]):
                if cell.cell_type != "code":
                    continue
                if index in self.exercises:
                    self.export(index, self.exercises[index])
                elif not self.execute(cell, index):
                    self.late = True
        for cell in self.nb.cells[last + 1:]:  # not run: what the learner saved is not shown
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        self.send({"notebook": trimmed(self.nb)})

    def execute(self, cell, index: int) -> bool:
        """Run one cell; False if it timed out or killed the kernel (the kernel is then fine)."""
        start = time.monotonic()
        try:
            self.client.execute_cell(cell, index)
            late = time.monotonic() - start >= self.timeout
            stuck = late and not self.answers()
        except (CellTimeoutError, DeadKernelError) as e:
            late, stuck = True, True
            cell.outputs.append(_error(TIMEOUT_NAME if isinstance(e, CellTimeoutError)
                                       else "DeadKernelError", str(e).splitlines()[0]))
        if late and not any(o.get("ename") == TIMEOUT_NAME for o in cell.outputs):
            cell.outputs.append(_error(TIMEOUT_NAME, "the cell ran past the timeout"))
        if stuck:
            self.restart()
        elif not late:
            self.ran.append(index)
        return not late

    def export(self, index: int, exercise: dict) -> None:
        gid = exercise["grade_id"]
        path = f"{ANSWERS}/{gid}.json"
        call = ("__import__('tpviz.grading.capture', fromlist=['export']).export("
                f"{path!r}, {exercise['args']!r}, {exercise['kwargs']!r}, "
                f"{exercise['source']!r})")
        probe = NotebookNode(cell_type="code", source=call, metadata={}, outputs=[],
                             execution_count=None)
        if os.path.exists(path):
            os.remove(path)
        ok = self.execute(probe, index)
        if index in self.ran:
            self.ran.remove(index)  # nothing to replay: the export defines nothing
        if not ok or self.late:
            self.send({"timed_out": gid})
        self.late = False
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            errors = [o.get("evalue", "") for o in probe.outputs if o.get("output_type") == "error"]
            data = {"failed": (errors[-1] if errors else f"{type(e).__name__}: {e}")[:500]}
        self.send({"answer": gid, "data": data})

    def answers(self) -> bool:
        """Whether the kernel runs a trivial cell within PROBE_S."""
        kc = self.client.kc
        msg_id = kc.execute("None", silent=True, store_history=False)
        deadline = time.monotonic() + PROBE_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = run_sync(kc.shell_channel.get_msg)(timeout=left)
            except Exception:  # queue.Empty: no answer in time
                return False
            if msg["parent_header"].get("msg_id") == msg_id:
                return True
        return False

    def restart(self) -> None:
        """Restart a stuck or dead kernel and replay the cells that finished before."""
        run_sync(self.client.km.restart_kernel)(now=True)
        run_sync(self.client.kc.wait_for_ready)(timeout=self.client.startup_timeout)
        for index in list(self.ran):
            replay = copy.deepcopy(self.nb.cells[index])
            try:
                self.client.execute_cell(replay, index, store_history=False)
            except (CellTimeoutError, DeadKernelError):
                break


def _error(name: str, value: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=name, evalue=value,
                        traceback=[f"{name}: {value}"])


def trimmed(nb) -> dict:
    """The notebook with long outputs cut (the feedback page shows the start of each)."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if "text" in out and len(out["text"]) > MAX_TEXT:
                out["text"] = out["text"][:MAX_TEXT] + "\n… (output cut)\n"
            for key, value in list(out.get("data", {}).items()):
                if isinstance(value, str) and len(value) > (MAX_IMAGE if key.startswith(
                        "image/") else MAX_TEXT):
                    out["data"][key] = "… (output cut)" if key.startswith("text/") else ""
    return nb


def main() -> None:
    try:  # the first process the system kills when memory runs out (raising it needs no right)
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    events = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the kernel's and the libraries' prints must not mix with the events
    job = json.load(sys.stdin)
    poll_in_slices()

    def send(event: dict) -> None:
        events.write(json.dumps(event, allow_nan=True) + "\n")
        events.flush()

    Runner(job, send).run()


if __name__ == "__main__":
    main()
