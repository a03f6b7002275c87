"""One grading worker's nbgrader, kept running: ``python -m tpviz.grading.worker <course>``.

Importing nbgrader takes about 4 s on a laptop core, and ``nbgrader autograde`` and ``nbgrader
generate_feedback`` as commands pay it for every submission, twice. A worker process imports it
once and runs both through nbgrader's own Python API (:class:`nbgrader.apps.NbGraderAPI`, as
nbgrader's formgrader does), one request per line on stdin, one JSON reply per line::

    -> ["autograde", "05_zero", "ada"]
    <- {"success": true, "log": "...", "seconds": 17.9}

The course's ``nbgrader_config.py`` configures it as it configures the commands. Kernels are
still started fresh for each submission by nbgrader, so nothing a submission does survives it.
Replies go to the original stdout; anything else that writes to stdout (nbgrader, a library)
lands in ``worker.log`` in the course.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def serve(root: Path) -> None:
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints of nbgrader or a library must not break the replies
    os.chdir(root)
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    api = NbGraderAPI(config=PyFileConfigLoader("nbgrader_config.py", path=str(root))
                      .load_config())
    for line in sys.stdin:
        command, chapter, student = json.loads(line)
        start = time.perf_counter()
        if command == "autograde":
            result = api.autograde(chapter, student, force=True, create=True)
        elif command == "generate_feedback":
            result = api.generate_feedback(chapter, student, force=True)
        else:
            result = {"success": False, "error": f"unknown command {command!r}"}
        log = result.get("log") or ""
        if result.get("error"):
            log += "\n" + result["error"]
        replies.write(json.dumps({"success": bool(result.get("success")), "log": log,
                                  "seconds": round(time.perf_counter() - start, 2)}) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
