"""End to end with real nbgrader: a fake class, two chapters.

- bob answers the first chapter wrong and replaces every check cell by ``pass``
  (nbgrader restores the locked check cells, so he still scores 0);
- dee answers right, but her first chapter raises in an early cell (grading goes on) and in the
  second her first answer loops forever inside compiled code (a ``jax.lax.while_loop`` the
  kernel interrupt cannot stop: that exercise scores 0 and is noted "timed out", the kernel is
  restarted and the rest graded);
- eve hands in a file that is not a notebook: reported, 0 points, the others are graded;
- fay hands in the second chapter's student copy untouched but switches the grading mode off
  in every answer cell (``os.environ.pop('TPVIZ_GRADING')``): still 0, not nbgrader's full marks;
- gus answers right, but deletes every check cell of the first chapter: they are put back and
  graded; he also hands in a misnamed file (``05_zer0.ipynb``): reported and skipped.

Each case is handed in once (a class of 6 notebooks, the fewest that cover them): an
untouched copy and right answers are each covered by fay and gus.

Runs ``nbgrader generate_assignment``, ``autograde``, ``generate_feedback`` and ``export``
through ``tpviz-grade``: 6 notebooks in fresh kernels, one of them with a timeout.
"""

import csv
import json
import re
from pathlib import Path

import pytest

from tpviz.errors import GradingError
from tpviz.grading import metadata

pytest.importorskip("nbgrader", reason="the instructor extra: pip install -e '.[instructor]'")

from tpviz.grading.course import release
from tpviz.grading.grade import main

BOOK = Path(__file__).resolve().parents[1] / "book"
CHAPTERS = ["00_devices_meshes_shardings", "05_zero"]  # the two fastest chapters
TIMEOUT_S = 20  # per cell; the slowest cell of these chapters takes about 1 s
HANDED_IN = {"bob": (0,), "dee": (0, 1), "fay": (1,), "gus": (0, 1)}  # chapters, by position
COMPILED_LOOP = ("import jax\njax.jit(lambda x: jax.lax.while_loop(lambda c: c > -1.0, "
                 "lambda c: c + 1.0, x))(0.0).block_until_ready()\n")


def _nbgrader(cell):
    return cell["metadata"].get("nbgrader", {})


def _answers(book_nb):
    """grade_id of each answer cell -> its source in the book (the right answer)."""
    return {_nbgrader(c)["grade_id"]: c["source"] for c in book_nb["cells"]
            if _nbgrader(c).get("solution")}


def _wrong(source: str) -> str:
    """A wrong answer from a stub: values -1, functions that return None."""
    source = re.sub(r"= \.\.\.", "= -1", source)
    return re.sub(r"raise NotImplementedError\(.*\)", "return None", source)


def _code(source):
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
            "execution_count": None, "id": "added-by-student"}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    release(BOOK, root / "student", CHAPTERS)
    expected, notes = {}, {}  # (student, chapter, exercise) -> points, the grade sheet's note
    for n, chapter in enumerate(CHAPTERS):
        book_nb = json.loads((BOOK / f"{chapter}.ipynb").read_text())
        right = _answers(book_nb)
        _, exercises = metadata.nbgrader_metadata(book_nb)
        for student in [s for s, handed_in in HANDED_IN.items() if n in handed_in]:
            nb = json.loads((root / "student" / f"{chapter}.ipynb").read_text())
            for cell in nb["cells"]:
                meta = _nbgrader(cell)
                source = "".join(cell["source"])
                if meta.get("solution") and student in ("dee", "gus"):
                    cell["source"] = right[meta["grade_id"]]
                elif meta.get("solution") and student == "fay":
                    cell["source"] = ("import os\nos.environ.pop('TPVIZ_GRADING', None)\n"
                                      + source)
                elif meta.get("solution") and student == "bob":
                    cell["source"] = _wrong(source)
                elif meta.get("grade") and student == "bob" and n == 0:
                    cell["source"] = "pass"  # tampering with a locked check cell
            looped = None
            if student == "dee" and n == 0:
                nb["cells"].insert(2, _code("raise RuntimeError('an early mistake')"))
            if student == "dee" and n == 1:
                first = next(c for c in nb["cells"] if _nbgrader(c).get("solution"))
                first["source"] = COMPILED_LOOP + "".join(first["source"])
                looped = first["metadata"]["nbgrader"]["grade_id"].removesuffix("_answer")
            if student == "gus" and n == 0:
                nb["cells"] = [c for c in nb["cells"] if not _nbgrader(c).get("grade")
                               or _nbgrader(c).get("solution")]
            for ex in exercises:
                full = student == "gus" or (student == "dee" and ex.grade_id != looped)
                expected[(student, chapter, ex.grade_id)] = (ex.points if full else 0,
                                                             ex.points)
                if looped and ex.grade_id == looped:
                    notes[(student, chapter, ex.grade_id)] = "timed out"
            path = root / "submissions" / student / f"{chapter}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(nb, indent=1))
    misnamed = root / "submissions" / "gus" / "05_zer0.ipynb"
    misnamed.write_text(path.read_text())
    broken = root / "submissions" / "eve" / f"{CHAPTERS[1]}.ipynb"  # not a notebook at all
    broken.parent.mkdir()
    broken.write_text("{ this is not JSON")
    for ex in exercises:
        expected[("eve", CHAPTERS[1], ex.grade_id)] = (0, ex.points)
        notes[("eve", CHAPTERS[1], ex.grade_id)] = "not graded"
    code = main([str(root / "submissions"), str(root / "grades"), "--book", str(BOOK),
                 "--timeout", str(TIMEOUT_S)])
    assert code == 0
    return root, expected, notes


def test_the_class_gets_exactly_the_expected_grades(graded):
    root, expected, notes = graded
    with open(root / "grades" / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    got = {(r["student"], r["chapter"], r["exercise"]): (float(r["points"]),
                                                         float(r["max_points"])) for r in rows}
    assert got == expected
    assert {k: r["note"] for r in rows if r["note"]
            for k in [(r["student"], r["chapter"], r["exercise"])]} == notes
    assert sum(p for p, _ in got.values()) > 0 and any(p == 0 for p, _ in got.values())


def test_feedback_per_student(graded):
    root, _, _ = graded
    feedback = root / "grades" / "feedback"
    assert "05_zer0.ipynb is not the name of a chapter (did you mean 05_zero.ipynb?)" in (
        feedback / "gus.html").read_text()
    assert "restored deleted check cell" in (feedback / "gus.html").read_text()
    handed_in = {**HANDED_IN, "eve": (1,)}
    for student, positions in handed_in.items():
        page = (feedback / f"{student}.html").read_text()
        assert f"Grades of {student}" in page
        for chapter in [CHAPTERS[n] for n in positions]:
            assert f"{student}/{chapter}.html" in page
            assert "<html" in (feedback / student / f"{chapter}.html").read_text().lower()


def test_grading_again_skips_unchanged_submissions(graded, capsys):
    root, expected, _ = graded
    before = (root / "grades" / "grades.csv").read_text()
    assert main([str(root / "submissions"), str(root / "grades"), "--book", str(BOOK),
                 "--timeout", str(TIMEOUT_S)]) == 0
    log = capsys.readouterr().err
    assert log.count("unchanged, kept") == len({k[:2] for k in expected})
    assert (root / "grades" / "grades.csv").read_text() == before


def test_grading_again_never_overwrites_edited_grades(graded):
    root, _, _ = graded
    table = root / "grades" / "grades.csv"
    table.write_text(table.read_text() + "gus,00,manual,1,1\n")  # an instructor's edit
    with pytest.raises(GradingError, match="--force"):
        from tpviz.grading.grade import grade

        grade(root / "submissions", root / "grades", book=BOOK)
    assert "manual" in table.read_text()
