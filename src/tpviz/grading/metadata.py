"""nbgrader metadata of the chapters, generated from the exercise markers (never edited by hand).

An exercise in a chapter is a markdown prompt ``**Exercise N.k — title (medium).**``, a code cell
holding the answer between ``# BEGIN SOLUTION`` and ``# END SOLUTION``, and a check cell calling
``tpviz.exercises.check_<name>(...)``. From these markers this module writes nbgrader's cell
metadata (schema version 3):

- the answer cell: ``solution: true``, ``grade: false``, ``grade_id: "ex5_2_answer"``;
- the check cell: an autograded test, ``grade: true``, ``locked: true``, ``grade_id: "ex5_2"``,
  ``points`` by the difficulty written in the prompt: easy 1, medium 2, hard, build or design 3
  (the largest word wins: "(easy, build)" is 3). A prompt without a difficulty counts 1 point.

Every other cell loses any nbgrader metadata, so the markers are the one source of truth.

Usage::

    python -m tpviz.grading.metadata book            # rewrite the chapters whose metadata is stale
    python -m tpviz.grading.metadata --check book    # exit 1 and list them (the tests run this)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tpviz.errors import MarkerError
from tpviz.grading.student import BEGIN, END

SCHEMA_VERSION = 3
POINTS = {"easy": 1, "medium": 2, "hard": 3, "design": 3, "build": 3}
DEFAULT_POINTS = 1  # a prompt that names no difficulty
CHECK_CALL = re.compile(r"\btpviz\.exercises\.(check_\w+)\s*\(")
PROMPT = re.compile(r"\*\*Exercise\s+(\d+(?:\.\d+)*)\s*[—–-]+\s*(.*?)\*\*", re.S)
DIFFICULTY = re.compile(r"\(([^()]*)\)\s*\.?\s*$")


@dataclass(frozen=True)
class Exercise:
    """One graded exercise of a chapter, as read from its markers."""

    number: str  # "5.2", or the checker's name when the prompt has no number
    title: str
    points: int
    grade_id: str  # of the check cell; the answer cell's is grade_id + "_answer"


def source(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def is_solution_cell(cell: dict) -> bool:
    return cell["cell_type"] == "code" and any(
        line.strip() == BEGIN for line in source(cell).splitlines())


def is_check_cell(cell: dict) -> bool:
    return cell["cell_type"] == "code" and CHECK_CALL.search(source(cell)) is not None


def points_of(title: str) -> int:
    """Points for a prompt title such as "capacity (easy)" or "a trap (hard, design)"."""
    m = DIFFICULTY.search(title.strip().rstrip("."))
    words = re.findall(r"[a-z]+", m.group(1).lower()) if m else []
    found = [POINTS[w] for w in words if w in POINTS]
    return max(found) if found else DEFAULT_POINTS


def _grade_id(number: str) -> str:
    return "ex" + re.sub(r"[^A-Za-z0-9]+", "_", number)


def nbgrader_metadata(nb: dict) -> tuple[list[dict | None], list[Exercise]]:
    """The nbgrader metadata each cell should carry (None: none) and the chapter's exercises."""
    wanted: list[dict | None] = [None] * len(nb["cells"])
    exercises: list[Exercise] = []
    prompt: tuple[str, str] | None = None  # (number, title) of the last prompt seen
    answers: list[int] = []  # answer cells since the last check cell
    ids: set[str] = set()

    def unique(base: str) -> str:
        grade_id, n = base, 2
        while grade_id in ids or grade_id + "_answer" in ids:
            grade_id, n = f"{base}_{n}", n + 1
        return grade_id

    for i, cell in enumerate(nb["cells"]):
        text = source(cell)
        if cell["cell_type"] == "markdown":
            for m in PROMPT.finditer(text):
                prompt = (m.group(1), " ".join(m.group(2).split()).rstrip("."))
            continue
        if BEGIN in text and not is_solution_cell(cell):
            raise MarkerError(f"cell {i}: '{BEGIN}' must be a line of its own")
        if is_solution_cell(cell):
            if END not in text:
                raise MarkerError(f"cell {i}: '{BEGIN}' has no '{END}'")
            if is_check_cell(cell):
                raise MarkerError(f"cell {i}: the answer and its check must be separate cells")
            answers.append(i)
        elif is_check_cell(cell):
            checker = CHECK_CALL.search(text).group(1)
            number, title = prompt if prompt else (checker.removeprefix("check_"), checker)
            grade_id = unique(_grade_id(number))
            ids |= {grade_id, grade_id + "_answer"}
            ex = Exercise(number, title, points_of(title), grade_id)
            exercises.append(ex)
            wanted[i] = {"grade": True, "grade_id": grade_id, "locked": True,
                         "points": ex.points, "schema_version": SCHEMA_VERSION,
                         "solution": False}
            for k, j in enumerate(answers):
                wanted[j] = {"grade": False, "grade_id": grade_id + "_answer" + (
                    f"{k + 1}" if k else ""), "locked": False,
                    "schema_version": SCHEMA_VERSION, "solution": True}
            answers, prompt = [], None
    if answers:
        raise MarkerError(f"cell {answers[0]}: an answer cell with no check cell after it")
    return wanted, exercises


def apply(nb: dict) -> bool:
    """Write the wanted metadata into ``nb`` (in place); True when something changed."""
    wanted, _ = nbgrader_metadata(nb)
    changed = False
    for cell, meta in zip(nb["cells"], wanted, strict=True):
        md = cell.setdefault("metadata", {})
        if md.get("nbgrader") != meta:
            changed = True
            if meta is None:
                del md["nbgrader"]
            else:
                md["nbgrader"] = meta
    return changed


def dumps(nb: dict) -> str:
    """The notebook as the book stores it (nbformat's indentation, keys in their order)."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def stale(path: Path) -> bool:
    nb = json.loads(path.read_text())
    return apply(nb)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpviz.grading.metadata",
                                     description="Write (or --check) the nbgrader metadata of "
                                     "the chapters from their exercise markers.")
    parser.add_argument("paths", nargs="+", type=Path, help="chapter notebooks or folders")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a chapter's metadata is stale")
    args = parser.parse_args(argv)
    notebooks = sorted(q for p in args.paths for q in (p.glob("[0-9]*.ipynb") if p.is_dir()
                                                       else [p]))
    bad = 0
    for path in notebooks:
        nb = json.loads(path.read_text())
        try:
            changed = apply(nb)
        except MarkerError as e:
            print(f"{path}: {e}", file=sys.stderr)
            bad += 1
            continue
        if changed and args.check:
            print(f"{path}: nbgrader metadata is stale; run python -m tpviz.grading.metadata "
                  f"{path.parent}", file=sys.stderr)
            bad += 1
        elif changed:
            path.write_text(dumps(nb))
            print(f"updated {path}")
    if not args.check:
        print(f"{len(notebooks) - bad} chapters have up-to-date nbgrader metadata")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
