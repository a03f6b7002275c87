"""Grade a folder of submissions safely, without a JupyterHub: ``tpviz-grade`` (``make grade``).

``submissions/<student>/<chapter>.ipynb`` (e.g. ``submissions/ada/05_zero.ipynb``) are graded
against the student version of the book's chapters, which nbgrader's ``generate_assignment``
writes first (the temporary course holding the solutions is removed before any submission
runs). Each submission then runs in a bubblewrap sandbox of its own and its answers are judged
outside it (:mod:`tpviz.grading.jobs`), by ``--workers`` parallel workers (2 by default), with a
progress bar and the time left. Out come::

    grades/grades.csv                          student,chapter,exercise,points,max_points,note
    grades/feedback/<student>.html             the student's points, with links to:
    grades/feedback/<student>/<chapter>.html   the graded notebook, each check's verdict

A notebook at the top level (in no student's folder), one in a sub-folder of a student's
folder, a file not named after a chapter, and folder names with spaces are reported and
handled; the others are graded. Ctrl-C stops cleanly: what was graded is kept
(``grades/.tpviz-cache``) and the same command goes on from there (``--regrade``: grade all
again). Nothing is written into the book or the submissions, and a file in ``grades/`` changed
since it was written is not replaced without ``--force``. Without a sandbox (no ``bwrap``), it
refuses unless given ``--no-sandbox``.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import io
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from tpviz.errors import GradingError
from tpviz.grading import inner
from tpviz.grading.feedback import Pages, fallback_page, summary_page
from tpviz.grading.files import check_writable, refuse_inside, write_all
from tpviz.grading.isolate import Sandbox, default_memory
from tpviz.grading.jobs import CACHE, Cache, Context, Result, code_digest, grade_one, not_graded
from tpviz.grading.prepare import exercises_of
from tpviz.grading.progress import Progress
from tpviz.grading.release import DEFAULT_TIMEOUT_S, chapters, released_chapters
from tpviz.grading.warm import CompileCaches

DEFAULT_WORKERS = 2
HEADER = ["student", "chapter", "exercise", "points", "max_points", "note"]


def find_submissions(folder: Path) -> tuple[dict[str, dict[str, Path]], dict[str, list[str]]]:
    """``{student: {chapter: path}}`` from ``folder/<student>/**/<chapter>.ipynb``, and what was
    reported (``{student or "": [notes]}``): notebooks at the top level or nested deeper, and
    anything named ``*.ipynb`` that is not a regular file (a folder, a link)."""
    found: dict[str, dict[str, Path]] = {}
    notes: dict[str, list[str]] = {}
    paths = sorted(folder.rglob("*.ipynb"), key=lambda p: (len(p.parts), str(p)))
    for path in paths:
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):  # .ipynb_checkpoints and the like
            continue
        if path.is_symlink() or not path.is_file():  # a link could point at the solutions
            notes.setdefault(rel.parts[0] if len(rel.parts) > 1 else "", []).append(
                f"{rel}: not a regular file (a folder or a link); not graded")
            continue
        if len(rel.parts) == 1:
            notes.setdefault("", []).append(
                f"{rel}: a notebook in no student's folder; not graded (move it to "
                f"{folder}/<student>/{rel.name} and grade again)")
            continue
        student, chapter = rel.parts[0], path.stem
        if chapter in found.get(student, {}):
            notes.setdefault(student, []).append(
                f"{rel}: a second {path.name} in {student}'s folder; not graded (the one at "
                f"{found[student][chapter].relative_to(folder)} is)")
            continue
        if len(rel.parts) > 2:
            notes.setdefault(student, []).append(
                f"{rel}: found in a sub-folder; graded as {student}'s {chapter}")
        found.setdefault(student, {})[chapter] = path
    if not found and not notes:
        raise GradingError(f"no submissions in {folder}: expected "
                           f"{folder}/<student>/<chapter>.ipynb")
    return found, notes


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


def _line(r: Result, kept: bool) -> str:
    got, top = r.points
    how = "unchanged, kept" if kept else f"{r.seconds:.0f} s" + "".join(
        f", {k} {v:.0f} s" for k, v in r.phases.items())
    late = [row[0] for row in r.rows if row[3] == "timed out"]
    return (f"{r.student}/{r.chapter}: {got:g}/{top:g} points ({how})"
            + (f"; timed out: {', '.join(late)}" if late else "")
            + (f"; {r.problem}" if r.problem else "")
            + (f"; {len(r.notes)} changed cell(s) reported" if r.notes else ""))


def grade(submissions: Path, out: Path, *, book: Path = Path("book"),
          timeout: int = DEFAULT_TIMEOUT_S, force: bool = False,
          workers: int = DEFAULT_WORKERS, regrade: bool = False,
          unsafe: bool = False, memory: int | None = None) -> list[dict]:
    """Grade every submission; write ``out/grades.csv`` and the feedback; return the rows of
    grades.csv as dicts. Raises ``KeyboardInterrupt`` after a clean stop (the graded ones are
    kept in the cache, nothing else is written)."""
    refuse_inside(out, book, submissions)
    found, notes = find_submissions(submissions)
    for student, why in misnamed(found, book).items():
        notes.setdefault(student, []).extend(why.values())
    for student, lines in notes.items():
        for text in lines:
            print(f"warning: {student + ': ' if student else ''}{text}", file=sys.stderr)
    students = sorted(s for s in set(found) | set(notes) if s)
    names = sorted({chapter for subs in found.values() for chapter in subs})
    check_writable(out, ["grades.csv", *(f"feedback/{s}.html" for s in students),
                         *(f"feedback/{s}/{c}.html" for s, subs in found.items() for c in subs)],
                   force=force)  # before the long part: refuse early
    sandbox = Sandbox(unsafe=unsafe, hidden=(book, submissions, out),
                      memory=memory or default_memory(workers))
    digest = code_digest()
    releases = released_chapters(chapters(book, names), out / CACHE / ".releases", digest,
                                 timeout=timeout) if names else {}
    ctx = Context(sandbox, inner.Judge(sandbox, seconds=STARTUP_JUDGE_S + timeout), releases,
                  {c: exercises_of(nb) for c, nb in releases.items()}, timeout)
    cache = Cache(out, f"timeout={timeout}", releases, digest)
    jobs = [(s, c, p) for s, subs in sorted(found.items()) for c, p in sorted(subs.items())]
    caches = CompileCaches(out / CACHE / ".jax", digest)
    results, kept = run_all(ctx, cache, jobs, workers, regrade, caches)
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(HEADER)
    files: dict[str, bytes] = {}
    exporter = Pages(out)
    for (student, chapter), r in sorted(results.items()):
        writer.writerows([student, chapter, *row] for row in r.rows)
        trusted = {"".join(c.get("source", "")) for c in releases[chapter]["cells"]}
        page = f"feedback/{student}/{chapter}.html"
        try:
            files[page] = exporter.page(page, r, trusted, (student, chapter) in kept)
        except Exception as e:  # one page must never stop the class
            files[page] = fallback_page(
                r, f"its page could not be made ({type(e).__name__})").encode()
        notes.setdefault(student, []).extend(
            [f"{chapter}: {r.problem}"] * bool(r.problem) + [f"{chapter}: {n}" for n in r.notes])
    files["grades.csv"] = table.getvalue().encode()
    rows = list(csv.DictReader(io.StringIO(table.getvalue())))
    links = {k.removeprefix("feedback/") for k in files}
    for student in students:
        files[f"feedback/{student}.html"] = summary_page(
            student, [r for r in rows if r["student"] == student], links,
            notes.get(student, [])).encode()
    write_all(out, files, force=force)
    return rows


STARTUP_JUDGE_S = 120  # the judge's first request imports JAX and tpviz


def run_all(ctx: Context, cache: Cache, jobs: list, workers: int, regrade: bool,
            caches: CompileCaches) -> tuple[dict[tuple[str, str], Result], set]:
    """Grade the jobs (cached ones are kept: returned as the second value), each chapter's
    compile cache filled first; on Ctrl-C or SIGTERM, stop every sandbox, keep what finished and
    raise ``KeyboardInterrupt``."""
    results: dict[tuple[str, str], Result] = {}
    progress = Progress(len(jobs), workers)
    todo = []
    for student, chapter, path in jobs:
        try:
            was = None if regrade else cache.get(student, chapter, path.read_bytes(),
                                                 ctx.exercises[chapter])
        except OSError:  # unreadable: graded below, where that is reported
            was = None
        if was is None:
            todo.append((student, chapter, path))
        else:
            results[(student, chapter)] = was
            progress.step(_line(was, True), kept=True)
    kept = set(results)
    stopping = threading.Event()

    def work(student: str, chapter: str, path: Path) -> tuple[Result, bytes | None]:
        """The submission's result, and its bytes to cache it under (None: not to be cached,
        its grading failed and a rerun tries again). Whatever goes wrong costs this
        submission only."""
        try:
            data = path.read_bytes()  # what is graded is what the key is made of
            return grade_one(ctx, student, chapter, data), data
        except Exception as e:  # one submission must never stop the class
            return not_graded(student, chapter, ctx.exercises[chapter], (
                f"grading {path.name} failed ({type(e).__name__}: {str(e)[:300]}): 0 points "
                "for now; it is graded again on the next run")), None

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if (
        threading.current_thread() is threading.main_thread()) else None
    pool = ThreadPoolExecutor(max(1, min(workers, len(todo) or 1)))
    try:
        warm = sorted({chapter for _, chapter, _ in todo})
        if warm:
            ctx.judge.start()  # its imports overlap the warm-up
        for line in pool.map(lambda chapter: caches.warm(ctx, chapter), warm):
            progress.note(line)
        futures = {pool.submit(work, *job): job for job in todo}
        for future in as_completed(futures):
            r, data = future.result()
            if stopping.is_set():
                break
            if data is not None:
                cache.put(r, data)
            results[(r.student, r.chapter)] = r
            progress.step(_line(r, False))
    except KeyboardInterrupt:
        stopping.set()
        inner.kill_all()
        pool.shutdown(wait=True, cancel_futures=True)
        progress.close()
        print(f"\ninterrupted: {len(results)} of {len(jobs)} submissions graded and kept; run "
              "the same command again to grade the rest.", file=sys.stderr)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        ctx.judge.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    progress.close()
    return results, kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tpviz-grade", description="Grade submissions/<student>/<chapter>.ipynb, each in "
        "a sandbox of its own; write grades.csv and a feedback page per student.")
    parser.add_argument("submissions", type=Path, nargs="?", default=Path("submissions"))
    parser.add_argument("out", type=Path, nargs="?", default=Path("grades"))
    parser.add_argument("--book", type=Path, default=Path("book"),
                        help="folder of the chapters, with their solutions (default: book)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                        help="seconds a cell may run before it is stopped and its exercise "
                        f"scores 0 (default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help=f"submissions graded at once (default {DEFAULT_WORKERS})")
    parser.add_argument("--regrade", action="store_true",
                        help="grade every submission again, even those unchanged since graded")
    parser.add_argument("--force", action="store_true",
                        help="replace files in the output folder changed since tpviz wrote them")
    parser.add_argument("--memory", type=float, default=None, metavar="GIB",
                        help="the most memory (address space, GiB) one process of a "
                        "submission may take (default: 90%% of the machine's over --workers, "
                        "at least 6)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade without a sandbox where none can be made (UNSAFE: trusted "
                        "notebooks only)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    # SIGTERM and SIGHUP end the run as Ctrl-C does, at any step (the release's temporary
    # course, which holds the solutions, is removed on the way out); and Ctrl-C itself, even
    # where the shell that started this ignores it (a job started with & in a script)
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = [signal.signal(s, signal.default_int_handler) for s in stops] if (
        threading.current_thread() is threading.main_thread()) else []
    try:
        rows = grade(args.submissions, args.out, book=args.book, timeout=args.timeout,
                     force=args.force, workers=args.workers, regrade=args.regrade,
                     unsafe=args.no_sandbox,
                     memory=int(args.memory * 2**30) if args.memory else None)
    except GradingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        for s, handler in zip(stops, previous, strict=False):
            signal.signal(s, handler)
    subs = len({(r["student"], r["chapter"]) for r in rows})
    print(f"graded {subs} submissions in {time.perf_counter() - start:.0f} s: "
          f"{args.out / 'grades.csv'}, feedback in {args.out / 'feedback'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
