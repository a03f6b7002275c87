"""Grade a folder of submissions with nbgrader, without a JupyterHub.

``submissions/<student>/<chapter>.ipynb`` (e.g. ``submissions/ada/05_zero.ipynb``) are graded by
nbgrader's own commands in temporary nbgrader courses made from the book's chapters:
``generate_assignment`` (the gradebook learns the check cells and their points), then for each
submission ``autograde`` (a fresh kernel, a per-cell timeout, the check cells restored from the
book: edited ones by nbgrader, deleted ones by :mod:`tpviz.grading.jobs`; a kernel stuck in
compiled code is restarted and the rest graded) and ``generate_feedback``. Submissions are graded
by ``--workers`` parallel workers (2 by default), each with its own course, one progress line per
submission. Out come::

    grades/grades.csv                     student,chapter,exercise,points,max_points,note
    grades/feedback/<student>.html        the student's points, with links to:
    grades/feedback/<student>/<chapter>.html   nbgrader's feedback (the graded notebook)

``note`` says "timed out" for an exercise in which a cell ran past the timeout, "not graded" for
a file nbgrader could not run. A file whose name is not a chapter's is reported and skipped. A
rerun skips the submissions unchanged since their grade (kept in ``grades/.tpviz-cache``;
``--regrade`` grades everything again).

Usage: ``tpviz-grade submissions grades [--book book] [--timeout 120] [--workers 2] [--force]``
(or ``make grade``). Nothing is written into the book or the submissions, and a file in
``grades/`` changed since it was written is not replaced without ``--force``.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import html
import io
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from tpviz.errors import GradingError
from tpviz.grading.course import DEFAULT_TIMEOUT_S, Course, chapters
from tpviz.grading.files import check_writable, refuse_inside, write_all
from tpviz.grading.jobs import Cache, Result, grade_one

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
DEFAULT_WORKERS = 2
HEADER = ["student", "chapter", "exercise", "points", "max_points", "note"]


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


def misnamed(found: dict[str, dict[str, Path]], book: Path) -> dict[str, dict[str, str]]:
    """Remove from ``found`` the files not named after a chapter; return ``{student:
    {file name: why}}`` for them (with the closest chapter name, if one is close)."""
    known = [p.stem for p in chapters(book)]
    skipped: dict[str, dict[str, str]] = {}
    for student, subs in found.items():
        for name in [n for n in subs if n not in known]:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            why = (f"{name}.ipynb is not the name of a chapter"
                   + (f" (did you mean {close[0]}.ipynb?)" if close else "")
                   + ": not graded; rename it and grade again")
            skipped.setdefault(student, {})[f"{name}.ipynb"] = why
            del subs[name]
    return skipped


def _progress(total: int):
    """A function to call once per finished submission: tqdm's bar if tqdm is installed, else
    one line per submission on stderr."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    bar = tqdm(total=total, unit="submission", file=sys.stderr) if tqdm else None
    done = [0]

    def step(r: Result, cached: bool) -> None:
        done[0] += 1
        got, top = r.points
        how = ("unchanged, kept" if cached else f"{r.seconds:.0f} s"
               + "".join(f", {k} {v:.0f} s" for k, v in r.phases.items()))
        late = [row[0] for row in r.rows if row[3] == "timed out"]
        line = (f"[{done[0]}/{total}] {r.student}/{r.chapter}: {got:g}/{top:g} points ({how})"
                + (f"; timed out: {', '.join(late)}" if late else "")
                + (f"; {r.problem}" if r.problem else ""))
        if bar is not None:
            bar.write(line)
            bar.update(1)
        else:
            print(line, file=sys.stderr, flush=True)

    return step


def grade(submissions: Path, out: Path, *, book: Path = Path("book"),
          timeout: int = DEFAULT_TIMEOUT_S, force: bool = False,
          workers: int = DEFAULT_WORKERS, regrade: bool = False) -> list[dict]:
    """Autograde every submission; write ``out/grades.csv`` and the feedback; return the rows
    of grades.csv as dicts."""
    refuse_inside(out, book, submissions)
    found = find_submissions(submissions)
    skipped = misnamed(found, book)
    for student, why in skipped.items():
        for text in why.values():
            print(f"warning: {student}/{text}", file=sys.stderr)
    students = sorted(set(found) | set(skipped))
    names = sorted({chapter for subs in found.values() for chapter in subs})
    check_writable(out, ["grades.csv", *(f"feedback/{s}.html" for s in students),
                         *(f"feedback/{s}/{c}.html" for s, subs in found.items() for c in subs)],
                   force=force)  # before the long part: refuse early
    jobs = [(s, c, p) for s, subs in sorted(found.items()) for c, p in sorted(subs.items())]
    cache = Cache(out, book, f"timeout={timeout}")
    results: dict[tuple[str, str], Result] = {}
    step = _progress(len(jobs))
    todo = []
    for student, chapter, path in jobs:
        kept = None if regrade else cache.get(student, chapter, path)
        if kept is None:
            todo.append((student, chapter, path))
        else:
            results[(student, chapter)] = kept
            step(kept, True)
    if todo:
        courses, lock, local = [], threading.Lock(), threading.local()
        paths = chapters(book, names)

        def work(student: str, chapter: str, path: Path) -> Result:
            if not hasattr(local, "course"):  # one course per worker thread
                local.course = Course(paths, timeout=timeout).__enter__()
                with lock:
                    courses.append(local.course)
            return grade_one(local.course, book, student, chapter, path)

        try:
            with ThreadPoolExecutor(max(1, min(workers, len(todo)))) as pool:
                futures = {pool.submit(work, *job): job for job in todo}
                for future in as_completed(futures):
                    r = future.result()
                    cache.put(r, futures[future][2])
                    results[(r.student, r.chapter)] = r
                    step(r, False)
        finally:
            for course in courses:
                course.__exit__(None, None, None)
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(HEADER)
    files: dict[str, bytes] = {}
    for (student, chapter), r in sorted(results.items()):
        writer.writerows([student, chapter, *row] for row in r.rows)
        files[f"feedback/{student}/{chapter}.html"] = (r.feedback or _fallback(r)).encode()
    files["grades.csv"] = table.getvalue().encode()
    rows = list(csv.DictReader(io.StringIO(table.getvalue())))
    for student in students:
        files[f"feedback/{student}.html"] = summary_page(
            student, [r for r in rows if r["student"] == student], files,
            skipped.get(student, {}),
            [r.problem for (s, _), r in sorted(results.items()) if s == student and r.problem]
        ).encode()
    write_all(out, files, force=force)
    return rows


def _fallback(r: Result) -> str:
    esc = html.escape
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(r.chapter)}"
            f"</title></head><body><h1>{esc(r.student)}: {esc(r.chapter)}</h1><p>This "
            f"submission {esc(r.problem or 'could not be graded')}.</p></body></html>\n")


def summary_page(student: str, rows: list[dict], files: dict,
                 skipped: dict[str, str] | None = None, problems: list[str] = ()) -> str:
    """One HTML page per student: points per exercise and chapter, links to the feedback, and
    the files that were not graded, with why."""
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(student)}: "
             "grades</title></head><body>", f"<h1>Grades of {esc(student)}</h1>"]
    notes = [*(skipped or {}).values(), *problems]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    for chapter in sorted({r["chapter"] for r in rows}):
        mine = [r for r in rows if r["chapter"] == chapter]
        got = sum(float(r["points"]) for r in mine)
        top = sum(float(r["max_points"]) for r in mine)
        link = f"{student}/{chapter}.html"
        title = (f"<a href='{esc(link)}'>{esc(chapter)}</a>"
                 if f"feedback/{link}" in files else esc(chapter))
        parts.append(f"<h2>{title}: {got:g} / {top:g}</h2><table><tr><th>exercise</th>"
                     "<th>points</th><th>max points</th><th>note</th></tr>")
        parts += [f"<tr><td>{esc(r['exercise'])}</td><td>{esc(r['points'])}</td>"
                  f"<td>{esc(r['max_points'])}</td><td>{esc(r['note'])}</td></tr>"
                  for r in mine]
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
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help=f"submissions graded at once (default {DEFAULT_WORKERS})")
    parser.add_argument("--regrade", action="store_true",
                        help="grade every submission again, even those unchanged since graded")
    parser.add_argument("--force", action="store_true",
                        help="replace files in the output folder changed since tpviz wrote them")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        rows = grade(args.submissions, args.out, book=args.book, timeout=args.timeout,
                     force=args.force, workers=args.workers, regrade=args.regrade)
    except GradingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    subs = len({(r["student"], r["chapter"]) for r in rows})
    print(f"graded {subs} submissions in {time.perf_counter() - start:.0f} s: "
          f"{args.out / 'grades.csv'}, feedback in {args.out / 'feedback'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
