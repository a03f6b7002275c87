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


def poll_in_slices() -> None:
    """The grading runner's fix for the kernel client's lost replies (its docstring says
    which), loaded from its file: it imports nothing of tpviz, whose package imports JAX."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "src", "tpviz", "grading", "runner.py")
    spec = importlib.util.spec_from_file_location("tpviz_grading_runner", path)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    runner.poll_in_slices()


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
