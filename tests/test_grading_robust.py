"""One malformed or hostile submission never stops the grading of a class.

Each test feeds one broken thing (a file that is not a notebook, a crash while grading, a page
that cannot be made, a folder named like a notebook) beside a good submission, and checks that
the broken one is reported with 0 points and the good one is graded. Nothing here starts a
sandbox: the slow end-to-end class is tests/test_grading_class.py.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("nbgrader", reason="the instructor extra: pip install -e '.[instructor]'")

from tpviz.grading import grade as grading
from tpviz.grading.feedback import Pages, notebook_page
from tpviz.grading.jobs import Result
from tpviz.grading.prepare import MAX_DEPTH, Exercise, prepare

BOOK = Path(__file__).resolve().parents[1] / "book"
CHAPTER = sorted(BOOK.glob("[0-9]*.ipynb"))[0].stem


def _cell(gid, source, grade=False, solution=False):
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None,
            "metadata": {"nbgrader": {"grade_id": gid, "grade": grade, "solution": solution,
                                      **({"points": 1} if grade else {})}}}


RELEASE = {"cells": [_cell("a_answer", "x = ...", solution=True),
                     _cell("a", "tpviz.exercises.check_a(x)", grade=True)]}


def _nested(levels: int):
    value: object = 0
    for _ in range(levels):
        value = [value]
    return value


def _with(**cell) -> bytes:
    """A submission whose answer cell has the given fields."""
    return json.dumps({"cells": [{**_cell("a_answer", "x = 1", solution=True), **cell}]}).encode()


# --- (a) the notebook's structure is checked before anything takes it apart ------------------

@pytest.mark.parametrize(("data", "why"), [
    (_with(source=5), "the source of cell 0 is not text"),
    (_with(source=["x = 1\n", 5]), "the source of cell 0 is not text"),
    (_with(metadata=[]), "the metadata of cell 0 is not a mapping"),
    (_with(outputs=5), "the outputs of cell 0 are not a list"),
    (json.dumps({"cells": [5]}).encode(), "cell 0 is not a code, markdown or raw cell"),
    (json.dumps({"cells": [], "metadata": "x"}).encode(), "its metadata is not a mapping"),
    (b"[" * 100_000 + b"]" * 100_000, f"nested over {MAX_DEPTH} levels"),  # RecursionError
    (_with(metadata={"deep": _nested(MAX_DEPTH)}), f"nested over {MAX_DEPTH} levels"),
    (b'{"cells": "\xff"}', "utf-8"),
], ids=["source-int", "source-list-int", "metadata-list", "outputs-int", "cell-int",
        "nb-metadata-str", "deep-json", "deep-metadata", "not-utf8"])
def test_a_malformed_notebook_is_a_value_error_that_names_the_part(data, why):
    with pytest.raises(ValueError, match=why):
        prepare(data, RELEASE)


def test_odd_but_harmless_notebooks_are_still_graded():
    # nbgrader metadata that is not a mapping means "no nbgrader metadata"; 20 levels of
    # nesting in a cell's metadata are allowed (a notebook of Jupyter's needs fewer than 10)
    sub = {"cells": [_cell("a_answer", ["x = ", "2"], solution=True),
                     {"cell_type": "code", "source": "y = 1", "outputs": [],
                      "metadata": {"nbgrader": [1], "deep": _nested(20)}}]}
    p = prepare(json.dumps(sub).encode(), RELEASE)
    assert [e["source"] for e in p.exercises] == ["x = 2"]
    assert ["".join(c["source"]) for c in p.notebook["cells"]] == [
        "x = 2", "tpviz.exercises.check_a(x)", "y = 1"]


# --- (b) a crash while grading one submission costs that submission only -------------------

EXERCISES = [Exercise("a", 2.0, "check_a", ["x"], {}, RELEASE["cells"][1], "x = ...")]


class _Cache:
    def __init__(self):
        self.put_for = []

    def get(self, student, chapter, data, exercises):
        return None

    def put(self, result, data):
        self.put_for.append(result.student)


def test_a_crash_while_grading_one_submission_gives_it_zero_and_grades_the_rest(
        tmp_path, monkeypatch):
    for student in ("ada", "eve"):
        (tmp_path / student).mkdir()
        (tmp_path / student / f"{CHAPTER}.ipynb").write_text("{}")
    (tmp_path / "dir.ipynb").mkdir()  # unreadable as a file: IsADirectoryError

    def grade_one(ctx, student, chapter, data):
        if student == "eve":
            raise TypeError("a crafted notebook")
        return Result(student, chapter, [["a", 2, 2, ""]], {"a": ["ok", "✓"]})

    monkeypatch.setattr(grading, "grade_one", grade_one)
    ctx = SimpleNamespace(exercises={CHAPTER: EXERCISES},
                          judge=SimpleNamespace(start=lambda: None, close=lambda: None))
    caches = SimpleNamespace(warm=lambda ctx, chapter: f"{chapter}: warm")
    cache = _Cache()
    jobs = [("ada", CHAPTER, tmp_path / "ada" / f"{CHAPTER}.ipynb"),
            ("eve", CHAPTER, tmp_path / "eve" / f"{CHAPTER}.ipynb"),
            ("bob", CHAPTER, tmp_path / "dir.ipynb")]
    results, kept = grading.run_all(ctx, cache, jobs, 2, False, caches)
    assert kept == set()
    assert {k: r.points for k, r in results.items()} == {
        ("ada", CHAPTER): (2, 2), ("eve", CHAPTER): (0, 2), ("bob", CHAPTER): (0, 2)}
    eve, bob = results[("eve", CHAPTER)], results[("bob", CHAPTER)]
    assert f"grading {CHAPTER}.ipynb failed (TypeError: a crafted notebook)" in eve.problem
    assert "failed (IsADirectoryError" in bob.problem
    assert [row[3] for row in eve.rows] == ["not graded"]
    assert cache.put_for == ["ada"]  # a failed grading is not kept: the next run tries again


# --- (c) a notebook page that cannot be made falls back to a short page ---------------------

@pytest.mark.parametrize("notebook", [
    {"cells": [5]}, {"cells": "x"}, {"cells": [{"source": "x"}]},
    {"cells": [{"cell_type": "code", "source": "x", "outputs": 5}]}, {"cells": _nested(5000)},
], ids=["cell-int", "cells-str", "no-cell-type", "outputs-int", "deep"])
def test_a_forged_notebook_from_the_sandbox_gets_the_short_page(notebook, tmp_path):
    r = Result("eve", CHAPTER, [["a", 0, 2, ""]], {"a": ["wrong", "✗ no <b>"]},
               notebook=notebook, checks={"a": 0})
    for page in (notebook_page(r), Pages(tmp_path).page("eve.html", r, set(), False).decode()):
        assert "its page could not be made" in page
        assert "✗ no &lt;b&gt;" in page  # the verdicts are still shown, escaped


def test_a_page_that_cannot_be_made_does_not_stop_the_grade_sheet(tmp_path, monkeypatch,
                                                                    capsys):
    subs, out = tmp_path / "subs", tmp_path / "out"
    for student in ("ada", "eve"):
        (subs / student).mkdir(parents=True)
        (subs / student / f"{CHAPTER}.ipynb").write_text("{}")
    results = {(s, CHAPTER): Result(s, CHAPTER, [["a", p, 2, ""]], {"a": ["ok", "✓"]})
               for s, p in (("ada", 2), ("eve", 0))}
    monkeypatch.setattr(grading, "released_chapters", lambda *a, **k: {CHAPTER: RELEASE})
    monkeypatch.setattr(grading, "run_all", lambda *a: (results, set()))

    def page(self, rel, result, trusted, kept):
        if result.student == "eve":
            raise RecursionError("a page too deep")
        return b"<p>ada's page</p>"

    monkeypatch.setattr(Pages, "page", page)
    rows = grading.grade(subs, out, book=BOOK, unsafe=True)
    assert [(r["student"], r["points"]) for r in rows] == [("ada", "2"), ("eve", "0")]
    assert (out / "grades.csv").exists()
    assert (out / "feedback" / "ada" / f"{CHAPTER}.html").read_text() == "<p>ada's page</p>"
    eve = (out / "feedback" / "eve" / f"{CHAPTER}.html").read_text()
    assert "its page could not be made (RecursionError)" in eve
    assert "WARNING" in capsys.readouterr().err  # --no-sandbox says so loudly


# --- (d) something named *.ipynb that is not a regular file ----------------------------------

def test_a_folder_or_link_named_like_a_notebook_is_reported_and_skipped(tmp_path):
    subs = tmp_path / "subs"
    (subs / "ada" / f"{CHAPTER}.ipynb").mkdir(parents=True)  # a folder
    (subs / "bob").mkdir()
    (subs / "bob" / f"{CHAPTER}.ipynb").symlink_to(BOOK / f"{CHAPTER}.ipynb")  # the solutions
    (subs / "eve").mkdir()
    (subs / "eve" / f"{CHAPTER}.ipynb").write_text("{}")
    (subs / "top.ipynb").mkdir()
    found, notes = grading.find_submissions(subs)
    assert found == {"eve": {CHAPTER: subs / "eve" / f"{CHAPTER}.ipynb"}}
    for who, rel in (("ada", f"ada/{CHAPTER}.ipynb"), ("bob", f"bob/{CHAPTER}.ipynb"),
                     ("", "top.ipynb")):
        assert notes[who] == [f"{rel}: not a regular file (a folder or a link); not graded"]


# --- no sandbox, and the progress bar ----------------------------------------------------------

def test_without_a_sandbox_grading_refuses_and_names_the_flag(tmp_path, monkeypatch, capsys):
    subs, out = tmp_path / "subs", tmp_path / "out"
    (subs / "ada").mkdir(parents=True)
    (subs / "ada" / f"{CHAPTER}.ipynb").write_text("{}")
    monkeypatch.setenv("TPVIZ_BWRAP", str(tmp_path / "no-bwrap"))
    assert grading.main([str(subs), str(out), "--book", str(BOOK)]) == 2
    err = capsys.readouterr().err
    assert "error: no sandbox can be made here" in err and "pass --no-sandbox" in err
    assert "no-bwrap" in err  # names what it tried
    assert not (out / "grades.csv").exists()


def test_the_bar_shows_the_time_left_from_the_graded_ones_only(monkeypatch):
    import io

    from tpviz.grading import progress

    now = [100.0]
    monkeypatch.setattr(progress, "time", SimpleNamespace(monotonic=lambda: now[0]))
    stream = io.StringIO()
    bar = progress.Progress(4, 2, stream=stream)
    bar.step("ada: kept", kept=True)  # from the cache: says nothing of the time per one
    now[0] = 130.0
    bar.step("bob: graded")  # 30 s for 1 graded, 2 left: 60 s
    now[0] = 150.0
    bar.step("eve: graded")  # 50 s for 2 graded, 1 left: 25 s
    now[0] = 175.0
    bar.step("lou: graded")
    bars = [ln for ln in stream.getvalue().splitlines() if ln.startswith("[")]
    assert bars == [
        f"[{'#' * 7}{'.' * 23}] 1/4 0:00 elapsed, estimating the time left",
        f"[{'#' * 15}{'.' * 15}] 2/4 0:30 elapsed, about 1:00 left",
        f"[{'#' * 22}{'.' * 8}] 3/4 0:50 elapsed, about 0:25 left",
        f"[{'#' * 30}] 4/4 1:15 elapsed, done"]


class _NoFunctionCheck:
    """A function-check server that fails the test if it is asked anything."""

    def ask(self, request):
        raise RuntimeError(f"the answer to {request['checker']} reached the function check")

    def close(self):
        pass


def test_the_release_not_the_submission_decides_how_an_answer_is_judged():
    """The sandbox writes whether an answer is code; a value exercise answered with an object
    (whose __float__ or __eq__ could read the expected value beside the checker) scores 0
    without running it, while a build exercise's function goes to the function check."""
    from tpviz.grading import jobs

    value = Exercise("v", 1.0, "check_holders", ["holders"], {}, {}, "holders = ...  # TODO")
    build = Exercise("b", 3.0, "check_total", ["total", "x"], {}, {},
                     "def block_total(x):\n    raise NotImplementedError\ntotal = ...")
    assert not value.takes_code and build.takes_code
    sent = {"args": [{"code": "holders", "callable": False}], "kwargs": {}, "code": True,
            "source": "class Sly: ...\nholders = Sly()", "context": {}}
    status, message = jobs.judge_one(None, value, sent, False, _NoFunctionCheck())
    assert status == "wrong" and "plain data" in message and "not run" in message
    with pytest.raises(RuntimeError, match="reached the function check"):
        jobs.judge_one(SimpleNamespace(timeout=1), build, sent, False, _NoFunctionCheck())


@pytest.mark.parametrize("checker, stub, code", [
    ("check_x", "x = ...  # TODO: your code here", False),
    ("check_x", "def f(a):\n    raise NotImplementedError\ny = ...", True),
    ("check_x", "class Plan:\n    pass", True),
    ("check_tp_plan", "tp_plan = ...", True),  # torch's ParallelStyle objects
    ("check_memory_cap", "def helper():\n    pass\nchoice = ...", False),  # a design's helper
    ("check_x", "%time x = ...", False),
])
def test_an_exercise_takes_code_by_its_release(checker, stub, code):
    assert Exercise("g", 1.0, checker, [], {}, {}, stub).takes_code is code


STOPPED_IN_RELEASE = """
import sys, time
from tpviz.grading import grade, release

def forever(self, *args):  # nbgrader's release step, stopped while it runs
    print(self.root, flush=True)
    time.sleep(600)

release.Course.nbgrader = forever
sys.exit(grade.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGHUP"])
def test_a_run_stopped_while_releasing_removes_the_course_with_the_solutions(
        tmp_path, signal_name):
    import signal
    import subprocess
    import sys

    chapter = sorted(BOOK.glob("[0-9]*.ipynb"))[0]
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "subs" / "alice" / chapter.name).write_bytes(chapter.read_bytes())
    run = subprocess.Popen([sys.executable, "-c", STOPPED_IN_RELEASE, str(tmp_path / "subs"),
                            str(tmp_path / "out"), "--book", str(BOOK), "--no-sandbox"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        course = Path(run.stdout.readline().strip())
        assert course.name.startswith("tpviz-course-") and (course / "source").is_dir()
        run.send_signal(getattr(signal, signal_name))
        assert run.wait(timeout=60) == 130, run.stderr.read()
    finally:
        run.kill()
    assert not course.exists()
