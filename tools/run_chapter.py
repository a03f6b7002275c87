"""Run one chapter top to bottom in a fresh kernel and write the executed notebook, for `make
test` (conftest.py's --chapters-into-cache), which runs this in a process of its own so that a
kernel that stops answering can be ended, with everything it started, and the chapter run again.

    python tools/run_chapter.py CHAPTER.ipynb OUT.ipynb CELL_SECONDS

OUT.ipynb.json says how long it took, the error (None when every cell ran) and whether a cell
timed out (no answer from the kernel in CELL_SECONDS); OUT.ipynb.answers has a line per checker
call saying whether its answer was plain data.
"""

from __future__ import annotations

import json
import os
import sys


def poll_in_slices(seconds: float = 1.0) -> None:
    """Make the kernel client's channels wait for a message in slices of ``seconds``.

    nbclient waits for a cell's reply with one ``poll`` on the shell socket for the whole cell
    time limit (and on the iopub socket with none). In about one chapter run in fifteen under
    `make test` the client and the kernel then both sat idle, the reply sent and never read
    (py-spy: nbclient in its event loop, the kernel in its own): a poll that missed its
    socket's wake-up (a zmq socket signals readiness on an edge; nbclient issue #312 reports the
    same hang with widgets). A fresh poll first asks the socket whether a message is waiting,
    so polling in slices reads such a reply within a slice; the cell's limit is kept.
    """
    from queue import Empty
    from time import monotonic

    from jupyter_client.channels import AsyncZMQSocketChannel

    whole = AsyncZMQSocketChannel.get_msg

    async def get_msg(self, timeout: float | None = None):
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            left = seconds if deadline is None else max(0.0, deadline - monotonic())
            try:
                return await whole(self, timeout=min(seconds, left))
            except Empty:
                if deadline is not None and monotonic() >= deadline:
                    raise

    AsyncZMQSocketChannel.get_msg = get_msg


def main(path: str, out: str, cell_seconds: int) -> None:
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution
    from nbclient.exceptions import CellTimeoutError

    poll_in_slices()
    nb = nbformat.read(path, as_version=4)
    # each checker call writes whether its answer is plain data (conftest.py compares this
    # with the grader's route, tpviz.grading.prepare); the kernel inherits the variable
    os.environ["TPVIZ_ANSWER_LOG"] = out + ".answers"
    result = single_nb_execution(nb, cwd=os.path.dirname(os.path.abspath(path)),
                                 timeout=cell_seconds, allow_errors=False)
    nbformat.write(nb, out)
    error = result.exc_string or (repr(result.err) if result.err is not None else None)
    with open(out + ".json", "w") as f:
        json.dump({"seconds": result.time, "error": error,
                   "timed_out": isinstance(result.err, CellTimeoutError)}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
