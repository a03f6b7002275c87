"""Grade a folder of submissions with nbgrader, without a JupyterHub.

``submissions/<student>/<chapter>.ipynb`` (e.g. ``submissions/ada/05_zero.ipynb``) are copied into
a temporary nbgrader course made from the book's chapters, then nbgrader's own commands run:
``generate_assignment`` (the gradebook learns the check cells and their points),
``autograde`` (each submission in a fresh kernel, with a per-cell timeout, the locked check
cells restored from the book so an edited check cannot pass), ``generate_feedback`` and
``export``. Out come::

    grades/grades.csv                     student,chapter,exercise,points,max_points
    grades/feedback/<student>.html        the student's points, with links to:
    grades/feedback/<student>/<chapter>.html   nbgrader's feedback (the graded notebook)

Usage: ``tpviz-grade submissions grades [--book book] [--timeout 120] [--force]``
(or ``make grade``). Nothing is written into the book or the submissions, and a file in
``grades/`` changed since it was written is not replaced without ``--force``.
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import json
import re
import shutil
import sys
import time
from pathlib import Path

from tpviz.errors import GradingError
from tpviz.grading import metadata
from tpviz.grading.course import DEFAULT_TIMEOUT_S, Course, chapters
from tpviz.grading.files import check_writable, refuse_inside, write_all

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def find_submissions(folder: Path) -> dict[str, dict[str, Path]]:
    """``{student: {chapter: path}}`` from ``folder/<student>/<chapter>.ipynb``."""
    found: dict[str, dict[str, Path]] = {}
    for path in sorted(folder.glob("*/*.ipynb")):
        student = path.parent.name
        if not STUDENT_ID.match(student):
            raise GradingError(f"{path}: a student folder name may use letters, digits, "
                               "'.', '_' and '-' only")
        found.setdefault(student, {})[path.stem] = path
    if not found:
        raise GradingError(f"no submissions in {folder}: expected "
                           f"{folder}/<student>/<chapter>.ipynb")
    return found


def grade(submissions: Path, out: Path, *, book: Path = Path("book"),
          timeout: int = DEFAULT_TIMEOUT_S, force: bool = False) -> list[dict]:
    """Autograde every submission; write ``out/grades.csv`` and the feedback; return the rows
    of grades.csv as dicts."""
    refuse_inside(out, book, submissions)
    found = find_submissions(submissions)
    names = sorted({chapter for subs in found.values() for chapter in subs})
    check_writable(out, ["grades.csv", *(f"feedback/{s}.html" for s in found),
                         *(f"feedback/{s}/{c}.html" for s, subs in found.items() for c in subs)],
                   force=force)  # before the long part: refuse early
    with Course(chapters(book, names), timeout=timeout) as course:
        for student, subs in found.items():
            for chapter, path in subs.items():
                dst = course.root / "submitted" / student / chapter / f"{chapter}.ipynb"
                dst.parent.mkdir(parents=True)
                shutil.copyfile(path, dst)
        # a submission nbgrader cannot read or run is reported, and the others are graded
        course.nbgrader("autograde", "*", "--force", check=False)
        course.nbgrader("generate_feedback", "*", "--force", check=False)
        course.nbgrader("export", "--exporter=tpviz.grading.nbgrader_plugins.ExerciseCsv",
                        "--to=grades.csv")
        table = (course.root / "grades.csv").read_bytes()
        table += zero_rows(found, table, book)
        files = {"grades.csv": table}
        for student, subs in found.items():
            for chapter in subs:
                page = course.root / "feedback" / student / chapter / f"{chapter}.html"
                if page.exists():
                    files[f"feedback/{student}/{chapter}.html"] = page.read_bytes()
    rows = list(csv.DictReader(io.StringIO(table.decode())))
    for student in found:
        files[f"feedback/{student}.html"] = summary_page(
            student, [r for r in rows if r["student"] == student], files).encode()
    write_all(out, files, force=force)
    return rows


def zero_rows(found: dict[str, dict[str, Path]], table: bytes, book: Path) -> bytes:
    """Rows of 0 points for the submissions nbgrader could not grade (a broken file)."""
    graded = {(r["student"], r["chapter"]) for r in csv.DictReader(io.StringIO(table.decode()))}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for student, subs in found.items():
        for chapter in subs:
            if (student, chapter) in graded:
                continue
            print(f"warning: {subs[chapter]} could not be graded: 0 points", file=sys.stderr)
            nb = json.loads((book / f"{chapter}.ipynb").read_text())
            for ex in metadata.nbgrader_metadata(nb)[1]:
                writer.writerow([student, chapter, ex.grade_id, 0, ex.points])
    return out.getvalue().encode()


def summary_page(student: str, rows: list[dict], files: dict) -> str:
    """One HTML page per student: points per exercise and chapter, links to the feedback."""
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(student)}: "
             "grades</title></head><body>", f"<h1>Grades of {esc(student)}</h1>"]
    for chapter in sorted({r["chapter"] for r in rows}):
        mine = [r for r in rows if r["chapter"] == chapter]
        got = sum(float(r["points"]) for r in mine)
        top = sum(float(r["max_points"]) for r in mine)
        link = f"{student}/{chapter}.html"
        title = (f"<a href='{esc(link)}'>{esc(chapter)}</a>"
                 if f"feedback/{link}" in files else esc(chapter))
        parts.append(f"<h2>{title}: {got:g} / {top:g}</h2><table><tr><th>exercise</th>"
                     "<th>points</th><th>max points</th></tr>")
        parts += [f"<tr><td>{esc(r['exercise'])}</td><td>{esc(r['points'])}</td>"
                  f"<td>{esc(r['max_points'])}</td></tr>" for r in mine]
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tpviz-grade", description="Autograde submissions/<student>/<chapter>.ipynb with "
        "nbgrader; write grades.csv and a feedback page per student.")
    parser.add_argument("submissions", type=Path, nargs="?", default=Path("submissions"))
    parser.add_argument("out", type=Path, nargs="?", default=Path("grades"))
    parser.add_argument("--book", type=Path, default=Path("book"),
                        help="folder of the chapters, with their solutions (default: book)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                        help="seconds a cell may run before it is stopped and scores 0 "
                        f"(default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--force", action="store_true",
                        help="replace files in the output folder changed since tpviz wrote them")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        rows = grade(args.submissions, args.out, book=args.book, timeout=args.timeout,
                     force=args.force)
    except GradingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    subs = len({(r["student"], r["chapter"]) for r in rows})
    print(f"graded {subs} submissions in {time.perf_counter() - start:.0f} s: "
          f"{args.out / 'grades.csv'}, feedback in {args.out / 'feedback'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
