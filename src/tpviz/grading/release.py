"""The student version of the chapters, as nbgrader's ``generate_assignment`` releases them.

nbgrader works on a course directory: ``source/<assignment>/<notebook>.ipynb`` (the instructor's
version, with the solutions) and ``release/`` (what students get). tpviz makes one in a temporary
folder, one assignment per chapter (named by the chapter's file name, e.g. ``05_zero``), runs
``generate_assignment`` with tpviz's stubs (:mod:`tpviz.grading.nbgrader_plugins`) and copies out
only the released notebooks, through :func:`tpviz.grading.files.write_all` (nothing is written
into the book, nothing changed since it was written is overwritten). Grading uses the same
release (:mod:`tpviz.grading.grade`).

Usage: ``python -m tpviz.grading.release book student [05_zero ...] [--force]``
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from tpviz.errors import GradingError
from tpviz.grading import metadata
from tpviz.grading.files import changed_files, check_writable, refuse_inside, write_all

DEFAULT_TIMEOUT_S = 120  # per cell, while grading; a chapter's slowest cell takes a few seconds

CONFIG = """\
# Written by tpviz.grading.release for a temporary course directory.
from tpviz.grading.nbgrader_plugins import configure

c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = "tpviz"
configure(c, timeout={timeout})
"""


def chapters(book: Path, names: Iterable[str] | None = None) -> list[Path]:
    """The chapter notebooks of ``book`` (all, or those named by file stem)."""
    found = {p.stem: p for p in sorted(book.glob("[0-9]*.ipynb"))}
    if names is None:
        return list(found.values())
    names = list(names)
    missing = [n for n in names if n not in found]
    if missing:
        raise GradingError(f"no chapter {', '.join(missing)} in {book} (chapters: "
                           f"{', '.join(found)})")
    return [found[n] for n in names]


def require_fresh_metadata(paths: Iterable[Path]) -> None:
    stale = [str(p) for p in paths if metadata.stale(p)]
    if stale:
        raise GradingError(f"the nbgrader metadata of {', '.join(stale)} is stale; run "
                           f"python -m tpviz.grading.metadata {Path(stale[0]).parent}")


class Course:
    """A temporary nbgrader course holding the given chapters (``with Course(...) as c``): its
    ``source/`` has the solutions, so it lives in a folder only its owner can read, removed on
    every way out (an error, Ctrl-C, the end of the process)."""

    def __init__(self, chapter_paths: list[Path], *, timeout: int = DEFAULT_TIMEOUT_S):
        require_fresh_metadata(chapter_paths)
        self.chapters = chapter_paths
        self.timeout = timeout

    def __enter__(self) -> Course:
        self.root = Path(tempfile.mkdtemp(prefix="tpviz-course-"))  # mode 0700
        atexit.register(shutil.rmtree, self.root, ignore_errors=True)
        try:
            (self.root / "nbgrader_config.py").write_text(
                CONFIG.format(root=str(self.root), timeout=self.timeout))
            for path in self.chapters:
                dst = self.root / "source" / path.stem / path.name
                dst.parent.mkdir(parents=True)
                shutil.copyfile(path, dst)
            self.nbgrader("generate_assignment", "*", "--force")  # every chapter at once
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        # a second Ctrl-C or SIGTERM (closing a terminal sends two) must not cut the removal
        # short and leave the solutions behind: the signals wait until it is done
        stops = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        main = threading.current_thread() is threading.main_thread()
        if main:
            signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        try:
            shutil.rmtree(self.root, ignore_errors=True)
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)

    def _env(self) -> dict[str, str]:
        # nbgrader calls `alembic` by name: put this Python's scripts first on the PATH
        bindir = str(Path(sys.executable).parent)
        return {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}

    def nbgrader(self, *args: str) -> str:
        """Run one nbgrader command in the course; its log in the error if it fails."""
        run = subprocess.run([sys.executable, "-m", "nbgrader", *args],
                             cwd=self.root, capture_output=True, text=True, env=self._env())
        if run.returncode:
            raise GradingError(f"nbgrader {' '.join(args)} failed:\n"
                               f"{(run.stdout + run.stderr)[-3000:]}")
        return run.stdout + run.stderr

    def released(self, chapter: str) -> bytes:
        return (self.root / "release" / chapter / f"{chapter}.ipynb").read_bytes()


def released_chapters(paths: list[Path], folder: Path, settings: str, *,
                      timeout: int = DEFAULT_TIMEOUT_S) -> dict[str, dict]:
    """The released notebook of each chapter (``{name: notebook}``), from ``folder`` where an
    earlier run kept it under the same key (the chapter's bytes, nbgrader's version and
    ``settings``: tpviz's code), else from nbgrader (one temporary course for all that are
    missing) and kept there. Only the grading process reads and writes ``folder``."""
    from importlib.metadata import version

    def key(path: Path) -> str:
        h = hashlib.sha256(f"{version('nbgrader')}|{settings}|{timeout}|".encode())
        h.update(path.read_bytes())
        return h.hexdigest()

    found, missing = {}, []
    for path in paths:
        try:
            saved = json.loads((folder / f"{path.stem}.json").read_text())
            if saved["key"] == key(path):
                found[path.stem] = saved["release"]
                continue
        except (OSError, ValueError, KeyError, TypeError):
            pass
        missing.append(path)
    if missing:
        with Course(missing, timeout=timeout) as course:  # the solutions: gone on the way out
            made = {p.stem: json.loads(course.released(p.stem)) for p in missing}
        folder.mkdir(parents=True, exist_ok=True)
        for path in missing:
            temporary = folder / f"{path.stem}.tmp"
            temporary.write_text(json.dumps({"key": key(path), "release": made[path.stem]}))
            os.replace(temporary, folder / f"{path.stem}.json")
        found.update(made)
    return found


def release(book: Path, out: Path, names: Iterable[str] | None = None, *,
            force: bool = False, keep_changed: bool = False) -> list[Path]:
    """Write the student version of the chapters into ``out`` (``out/<chapter>.ipynb``), as
    nbgrader's ``generate_assignment`` releases them; returns the files written.
    ``keep_changed``: leave a copy the learner changed as it is and write the others (``make
    lab`` does, each time it starts) instead of refusing to write anything."""
    refuse_inside(out, book)
    paths = chapters(book, names)
    if keep_changed:
        changed = set(changed_files(out, [p.name for p in paths]))
        for name in sorted(changed):
            print(f"kept {out / name}: you changed it (move it away for a fresh copy)")
        paths = [p for p in paths if p.name not in changed]
        if not paths:
            return []
    check_writable(out, [p.name for p in paths], force=force)  # before nbgrader runs
    with Course(paths) as course:
        files = {p.name: course.released(p.stem) for p in paths}
    return write_all(out, files, force=force)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tpviz.grading.release",
        description="Write the student version of the chapters (nbgrader generate_assignment "
        "with tpviz's stubs) into a folder outside the book.")
    parser.add_argument("book", type=Path, help="folder of the chapter notebooks")
    parser.add_argument("out", type=Path, help="output folder, e.g. student")
    parser.add_argument("chapters", nargs="*", help="chapter names (default: all), e.g. 05_zero")
    parser.add_argument("--force", action="store_true",
                        help="replace files changed since tpviz wrote them")
    parser.add_argument("--keep-changed", action="store_true",
                        help="keep the copies changed since tpviz wrote them and write the rest")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        written = release(args.book, args.out, args.chapters or None, force=args.force,
                          keep_changed=args.keep_changed)
    except GradingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(f"{len(written)} student notebooks written to {args.out} (unchanged ones are kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
