"""Grading one submission, in a worker's own nbgrader course, and remembering the result.

:func:`grade_one` copies a submission into the course (putting back any check cell the learner
deleted), runs nbgrader's ``autograde`` and ``generate_feedback`` for it alone (in the course's
worker process, :mod:`tpviz.grading.worker`), and reads its points from the gradebook. Each
worker of :func:`tpviz.grading.grade.grade` has a course of its own (nbgrader's gradebook is one
SQLite file), so workers never wait for each other.

:class:`Cache` keeps each result in ``<out>/.tpviz-cache/`` under a key made of the submission,
the chapter and the settings: a rerun skips a submission unchanged since its grade.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tpviz.grading import metadata
from tpviz.grading.course import Course

CACHE = ".tpviz-cache"
TIMEOUT_NAME = "CellTimeoutError"


@dataclass
class Result:
    """One submission's grade: rows ``[exercise, points, max_points, note]``, the feedback page
    (nbgrader's, or ours when nbgrader could not grade), and what went wrong, if anything."""

    student: str
    chapter: str
    rows: list[list] = field(default_factory=list)
    feedback: str = ""
    problem: str = ""
    seconds: float = 0.0
    phases: dict = field(default_factory=dict)  # seconds of nbgrader's autograde and feedback

    @property
    def points(self) -> tuple[float, float]:
        return (sum(float(r[1]) for r in self.rows), sum(float(r[2]) for r in self.rows))


def _grade_id(cell: dict) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def _is_check(cell: dict) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


def restore_check_cells(submission: bytes, released: bytes) -> tuple[bytes, list[str]]:
    """Put back every check cell of the released chapter missing from the submission, after the
    cell that precedes it in the chapter; returns the notebook and the restored grade ids.
    (An edited check cell is restored by nbgrader's ``OverwriteCells``.) A file that is not a
    notebook is returned unchanged: nbgrader reports it."""
    try:
        nb = json.loads(submission)
        cells = nb["cells"]
        ids = {_grade_id(c) for c in cells}
    except (ValueError, KeyError, TypeError, AttributeError):
        return submission, []
    restored = []
    previous = ""  # grade id of the chapter's cell before the one being looked at
    for cell in json.loads(released)["cells"]:
        gid = _grade_id(cell)
        if _is_check(cell) and gid not in ids:
            at = next((i + 1 for i, c in enumerate(cells) if previous and _grade_id(c) == previous),
                      len(cells))
            cells.insert(at, copy.deepcopy(cell))
            ids.add(gid)
            restored.append(gid)
        if gid:
            previous = gid
    if not restored:
        return submission, []
    return json.dumps(nb, indent=1).encode(), restored


def timeouts(autograded: Path) -> set[str]:
    """Grade ids of the exercises in which a cell timed out: the check cell that timed out, or
    the next check cell after a timed-out answer cell."""
    if not autograded.exists():
        return set()
    found, pending = set(), False
    for cell in json.loads(autograded.read_text())["cells"]:
        pending |= any(o.get("ename") == TIMEOUT_NAME for o in cell.get("outputs", []))
        if pending and _is_check(cell):
            found.add(_grade_id(cell))
            pending = False
    return found


def zero_rows(book: Path, chapter: str, note: str) -> list[list]:
    nb = json.loads((book / f"{chapter}.ipynb").read_text())
    return [[ex.grade_id, 0, ex.points, note] for ex in metadata.nbgrader_metadata(nb)[1]]


def grade_one(course: Course, book: Path, student: str, chapter: str, path: Path) -> Result:
    """Autograde ``path`` (``student``'s ``chapter``) in ``course``."""
    from tpviz.grading.nbgrader_plugins import grades_of

    start = time.perf_counter()
    result = Result(student, chapter)
    folder = course.root / "submitted" / student / chapter
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    data, restored = restore_check_cells(path.read_bytes(), course.released(chapter))
    (folder / f"{chapter}.ipynb").write_bytes(data)
    t0 = time.perf_counter()
    _, log = course.grade("autograde", chapter, student)
    t1 = time.perf_counter()
    course.grade("generate_feedback", chapter, student)
    result.phases = {"autograde": round(t1 - t0, 1),
                     "feedback": round(time.perf_counter() - t1, 1)}
    autograded = course.root / "autograded" / student / chapter / f"{chapter}.ipynb"
    late = timeouts(autograded)
    graded = grades_of(course.root / "gradebook.db", chapter, student)
    if graded and autograded.exists():  # (a failed run leaves 0s in the gradebook)
        result.rows = [[gid, score, top, "timed out" if gid in late else ""]
                       for gid, score, top in graded]
    else:
        reason = _reason(log)
        result.problem = f"could not be graded ({reason}): 0 points"
        result.rows = zero_rows(book, chapter, "not graded")
    if restored:
        result.problem = (result.problem + "; " if result.problem else "") + \
            f"restored deleted check cell(s) {', '.join(restored)}"
    page = course.root / "feedback" / student / chapter / f"{chapter}.html"
    result.feedback = page.read_text() if page.exists() else ""
    result.seconds = time.perf_counter() - start
    return result


def _reason(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):  # the exception itself, not nbgrader's "see the traceback"
        if re.match(r"^[\w.]*(Error|Exception)\b", ln) and "AutogradeApp" not in ln:
            return ln[:200]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln:
            return ln[:200]
    return lines[-1][:200] if lines else "nbgrader gave no reason"


class Cache:
    """Results kept in ``<out>/.tpviz-cache/<student>/<chapter>.json``, each under a key."""

    def __init__(self, out: Path, book: Path, settings: str):
        self.folder, self.book, self.settings = out / CACHE, book, settings

    def key(self, chapter: str, path: Path) -> str:
        h = hashlib.sha256(self.settings.encode())
        for data in (path.read_bytes(), (self.book / f"{chapter}.ipynb").read_bytes()):
            h.update(hashlib.sha256(data).digest())
        return h.hexdigest()

    def get(self, student: str, chapter: str, path: Path) -> Result | None:
        file = self.folder / student / f"{chapter}.json"
        try:
            saved = json.loads(file.read_text())
        except (OSError, ValueError):
            return None
        if saved.get("key") != self.key(chapter, path):
            return None
        saved.pop("key")
        return Result(**saved)

    def put(self, result: Result, path: Path) -> None:
        file = self.folder / result.student / f"{result.chapter}.json"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps({"key": self.key(result.chapter, path), **asdict(result)}))
