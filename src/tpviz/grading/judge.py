"""The judge of value answers: a process that never runs a learner's code.

``python -m tpviz.grading.judge`` reads one request per line on stdin, ``{"checker":
"check_fewest_devices", "args": [...], "kwargs": {...}}`` with the answers as plain data
(:mod:`tpviz.grading.plain`, written in the submission's sandbox), builds the values again from
that data alone, calls the book's checker on them, and answers one line per request on stdout:
``{"status": "ok" | "wrong" | "stub", "message": "..."}``. Whatever a learner's objects would
do on ``==`` or ``float()`` cannot happen here: only plain data reaches this process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

NOT_ATTEMPTED = "not attempted yet"


def verdict(check, args: list, kwargs: dict) -> tuple[str, str]:
    """Call a checker (``@checker``, in grading mode); ``(status, its message)``."""
    from tpviz.core.exercises import ExerciseFailed
    from tpviz.errors import describe

    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            check(*args, **kwargs)
    except ExerciseFailed as e:
        text = str(e)
        return ("stub" if text.endswith(f"{NOT_ATTEMPTED}.") else "wrong"), text
    except BaseException as e:  # the checker itself failed on this answer
        return "wrong", f"✗ your answer could not be checked ({describe(e)})"
    return "ok", printed.getvalue().strip()


def judge(request: dict) -> dict:
    import tpviz.exercises
    from tpviz.grading.plain import decode

    name = request["checker"]
    check = getattr(tpviz.exercises, name, None)
    if not name.startswith("check_") or check is None:
        return {"status": "wrong", "message": f"no checker {name!r} in this tpviz"}
    try:
        args = [decode(a) for a in request["args"]]
        kwargs = {k: decode(v) for k, v in request["kwargs"].items()}
    except Exception as e:  # data the sandbox wrote that does not decode
        return {"status": "wrong", "message": f"✗ your answer could not be read ({e})"}
    status, message = verdict(check, args, kwargs)
    return {"status": status, "message": message}


def main() -> None:
    os.environ["TPVIZ_GRADING"] = "1"  # a stub answer scores 0
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints go to stderr
    import tpviz

    tpviz.setup_devices(8)
    for line in sys.stdin:
        try:
            reply = judge(json.loads(line))
        except Exception as e:  # never stop the class for one request
            reply = {"status": "wrong", "message": f"✗ the answer could not be judged ({e})"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
