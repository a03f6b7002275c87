"""For instructors: nbgrader metadata from the markers, student copies, nothing ever lost.

The student copies are made by nbgrader's ``generate_assignment`` (the ``instructor`` extra);
the end-to-end grading of a fake class is in tests/test_grading_class.py.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tpviz.core import exercises as framework
from tpviz.errors import GradingError
from tpviz.grading import metadata
from tpviz.grading.files import MANIFEST, refuse_inside, write_all
from tpviz.grading.student import (
    BEGIN,
    END,
    WORKED_ANSWER_STUB,
    strip_solutions,
    strip_worked_answers,
)

pytest.importorskip("nbgrader", reason="the instructor extra: pip install -e '.[instructor]'")

from tpviz.grading.release import release

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = sorted(BOOK.glob("[0-9]*.ipynb"))


# --- the stub -------------------------------------------------------------------------------

def test_stub_keeps_names_and_signatures():
    source = "\n".join([
        "x = 1", BEGIN, "answer = 6 * 7", "def f(a, b=2):", "    return a + b", END, "check(answer)",
        "def g(block):", f"    {BEGIN}", "    return block.sum()", f"    {END}",
    ])
    out = strip_solutions(source)
    assert "6 * 7" not in out and "a + b" not in out and "block.sum()" not in out
    assert "answer = ..." in out and "def f(a, b=2):" in out
    assert "x = 1" in out and "check(answer)" in out
    assert "    raise NotImplementedError" in out  # the stub inside g keeps g's indentation
    compile(out, "<student>", "exec")


def test_unclosed_solution_is_an_error():
    with pytest.raises(ValueError, match="no '# END SOLUTION'"):
        strip_solutions(f"{BEGIN}\nx = 1")


def test_worked_answers_become_a_note():
    md = "**Question 1.** Why?\n\n```{admonition} Answer\n:class: dropdown\nBecause 42.\n```\nAfter."
    out = strip_worked_answers(md)
    assert "Because 42" not in out and "admonition" not in out
    assert out.startswith("**Question 1.** Why?") and out.endswith("After.")
    with pytest.raises(ValueError, match="no closing fence"):
        strip_worked_answers("```{admonition} Answer\nsecret")


def test_worked_answers_in_details_become_a_note_and_other_details_stay():
    md = ("**Question 1.** Why $x^2$?\n\n<details>\n<summary>Answer</summary>\n\nBecause "
          "$x \\cdot x$.\n\n<details><summary>More</summary>\n\nnested 42\n\n</details>\n\n"
          "</details>\nAfter.\n\n<details>\n<summary>Hint</summary>\n\nLook up.\n\n</details>")
    out = strip_worked_answers(md)
    assert "Because" not in out and "nested 42" not in out and "<summary>Answer" not in out
    assert out.startswith("**Question 1.** Why $x^2$?") and WORKED_ANSWER_STUB in out
    assert "After." in out and "<summary>Hint</summary>" in out and "Look up." in out
    one_line = strip_worked_answers("<details><summary><b>Answer</b></summary>\n\nx\n</details>")
    assert one_line == WORKED_ANSWER_STUB
    with pytest.raises(ValueError, match="no closing"):
        strip_worked_answers("<details>\n<summary>Answer</summary>\nsecret")


def test_a_stub_scores_zero_while_grading(monkeypatch, capsys):
    @framework.checker("Exercise")
    def check(answer):
        if answer != 42:
            raise framework.Wrong("no")

    check(...)  # in the book: a message, no failure
    assert framework.NOT_ATTEMPTED in capsys.readouterr().out
    monkeypatch.setenv(framework.GRADING_ENV, "1")  # under nbgrader's autograde
    with pytest.raises(framework.ExerciseFailed, match=framework.NOT_ATTEMPTED):
        check(...)
    check(42)


def test_the_grading_mode_cannot_be_switched_off_from_the_kernel(monkeypatch, capsys):
    @framework.checker("Exercise")
    def check(answer):
        return ""

    monkeypatch.setattr(framework, "GRADING", True)  # TPVIZ_GRADING was set at import
    monkeypatch.delenv(framework.GRADING_ENV, raising=False)  # os.environ.pop(...) in a cell
    with pytest.raises(framework.ExerciseFailed, match=framework.NOT_ATTEMPTED):
        check(...)


def test_a_check_cell_saying_not_attempted_scores_zero_outside_the_kernel():
    from nbformat import NotebookNode
    from nbgrader.utils import determine_grade

    from tpviz.grading import nbgrader_plugins as plugins

    assert plugins.NOT_ATTEMPTED == framework.NOT_ATTEMPTED
    cell = NotebookNode(cell_type="code", metadata={"nbgrader": {
        "grade": True, "solution": False, "points": 2, "grade_id": "x"}}, outputs=[
        NotebookNode(output_type="stream", name="stdout",
                     text=f"{framework.PENDING} X: {framework.NOT_ATTEMPTED}. Fill in the cell above.\n")])
    assert plugins._says_not_attempted(cell) and determine_grade(cell) == (2, 2)
    cell.outputs.append(NotebookNode(output_type="error", ename="NotAttempted", evalue="",
                                     traceback=[]))
    assert determine_grade(cell) == (0, 2)


def _cell(gid, grade=False, solution=False, source=None):
    return {"cell_type": "code", "source": source or gid, "outputs": [], "execution_count": None,
            "metadata": {"nbgrader": {"grade_id": gid, "grade": grade, "solution": solution,
                                      **({"points": 1} if grade else {})}}}


def _release():
    return {"cells": [_cell("a_answer", solution=True, source="x = ..."),
                      _cell("a", grade=True, source="tpviz.exercises.check_a(x)"),
                      _cell("b_answer", solution=True, source="y = ..."),
                      _cell("b", grade=True, source="tpviz.exercises.check_b(y, k=x)")]}


def test_check_cells_are_the_releases_and_every_change_is_named():
    from tpviz.grading.prepare import prepare

    sub = {"cells": [_cell("a_answer", solution=True, source="x = 1"),
                     _cell("a_renamed", grade=True, source="tpviz.exercises.check_a(x)"),
                     _cell("b_answer", solution=True, source="y = ..."),
                     _cell("mine", source="print(1)"),
                     _cell("b", grade=True, source="pass  # an edited check cell")]}
    sub["cells"][2]["metadata"]["nbgrader"]["grade"] = True  # an answer marked as graded
    p = prepare(json.dumps(sub).encode(), _release())
    sources = ["".join(c["source"]) for c in p.notebook["cells"]]
    assert sources == ["x = 1", "tpviz.exercises.check_a(x)", "y = ...",
                       "tpviz.exercises.check_b(y, k=x)", "print(1)"]
    assert [(e["grade_id"], e["index"], e["checker"], e["args"], e["kwargs"])
            for e in p.exercises] == [("a", 1, "check_a", ["x"], {}),
                                      ("b", 3, "check_b", ["y"], {"k": "x"})]
    assert p.untouched == {"b"}  # its answer is still the stub
    text = " | ".join(p.notes)
    assert "cell 1: its grade_id was changed from 'a' to 'a_renamed'" in text
    assert "cell 4: the check cell of b was edited" in text
    with pytest.raises(ValueError, match="not a Jupyter notebook"):
        prepare(b'{"cells": 3}', _release())


def test_deleted_check_cells_are_put_back_in_place():
    from tpviz.grading.prepare import prepare

    sub = {"cells": [_cell("a_answer", solution=True), _cell("b_answer", solution=True),
                     _cell("mine")]}
    p = prepare(json.dumps(sub).encode(), _release())
    assert [c["metadata"]["nbgrader"]["grade_id"] for c in p.notebook["cells"]] == [
        "a_answer", "a", "b_answer", "b", "mine"]
    assert sum("was missing; it was put back" in n for n in p.notes) == 2


def test_a_misnamed_submission_is_reported_and_skipped(tmp_path):
    from tpviz.grading.grade import misnamed

    found = {"ada": {"05_zer0": tmp_path / "a", NOTEBOOKS[0].stem: tmp_path / "b"}}
    skipped = misnamed(found, BOOK)
    assert found == {"ada": {NOTEBOOKS[0].stem: tmp_path / "b"}}
    assert "did you mean 05_zero.ipynb?" in skipped["ada"]["05_zer0.ipynb"]


# --- the metadata ---------------------------------------------------------------------------

@pytest.mark.parametrize(("title", "points"), [
    ("capacity (easy)", 1), ("drop order (medium)", 2), ("stages (hard)", 3),
    ("a trap (hard, design)", 3), ("design a layer (design)", 3), ("which case?", 1),
    ("f and g", 1), ("memory (the easy way) of a layer (Medium).", 2),
    ("row-parallel layer (easy, build)", 3), ("f and g (medium, build)", 3),
    ("count (easy, one-line)", 1), ("bytes (medium, multi-step)", 2),
])
def test_points_by_difficulty(title, points):
    assert metadata.points_of(title) == points


def _chapter(*cells):
    return {"cells": [{"cell_type": t, "metadata": {}, "source": s} for t, s in cells],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_metadata_from_markers():
    nb = _chapter(
        ("markdown", "**Exercise 3.1 — one (medium).** Do it."),
        ("code", f"{BEGIN}\nx = 1\n{END}"),
        ("code", "tpviz.exercises.check_one(x)"),
        ("markdown", "**Exercise 3.2 — two.** Do it."),
        ("code", "print('a helper cell')"),
        ("code", f"{BEGIN}\ny = 2\n{END}"),
        ("code", "tpviz.exercises.check_two(y)"),
    )
    wanted, exercises = metadata.nbgrader_metadata(nb)
    assert [(e.number, e.points, e.grade_id) for e in exercises] == [
        ("3.1", 2, "ex3_1"), ("3.2", 1, "ex3_2")]
    assert wanted[1] == {"grade": False, "grade_id": "ex3_1_answer", "locked": False,
                         "schema_version": 3, "solution": True}
    assert wanted[2] == {"grade": True, "grade_id": "ex3_1", "locked": True, "points": 2,
                         "schema_version": 3, "solution": False}
    assert wanted[0] is wanted[3] is wanted[4] is None
    assert metadata.apply(nb) and not metadata.apply(nb)  # idempotent


def test_metadata_ids_are_unique_and_bad_markers_are_named():
    nb = _chapter(("code", f"{BEGIN}\nx = 1\n{END}"), ("code", "tpviz.exercises.check_a(x)"),
                  ("code", "tpviz.exercises.check_a(x)"))
    _, exercises = metadata.nbgrader_metadata(nb)  # no prompt: named after the checker
    assert [e.grade_id for e in exercises] == ["exa", "exa_2"]
    with pytest.raises(metadata.MarkerError, match="cell 0: an answer cell with no check"):
        metadata.nbgrader_metadata(_chapter(("code", f"{BEGIN}\nx = 1\n{END}")))
    with pytest.raises(metadata.MarkerError, match="separate cells"):
        metadata.nbgrader_metadata(_chapter(
            ("code", f"{BEGIN}\nx = 1\n{END}\ntpviz.exercises.check_a(x)")))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_metadata_matches_markers(path):
    """Every check cell graded and locked, every answer cell a solution, unique ids: the
    chapter is what the script writes (run `python -m tpviz.grading.metadata book` if not)."""
    assert metadata.main(["--check", str(path)]) == 0
    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if "nbgrader" in c["metadata"]]
    ids = [c["metadata"]["nbgrader"]["grade_id"] for c in cells]
    assert len(ids) == len(set(ids))
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        assert meta.get("solution", False) == metadata.is_solution_cell(cell)
        assert meta.get("grade", False) == meta.get("locked", False) == metadata.is_check_cell(cell)
        if meta.get("grade"):
            assert meta["points"] in (1, 2, 3)


def test_check_mode_finds_stale_metadata(tmp_path):
    nb = json.loads(NOTEBOOKS[0].read_text())
    next(c for c in nb["cells"] if metadata.is_check_cell(c))["metadata"]["nbgrader"]["points"] = 9
    path = tmp_path / NOTEBOOKS[0].name
    path.write_text(metadata.dumps(nb))
    assert metadata.main(["--check", str(tmp_path)]) == 1
    assert metadata.main([str(tmp_path)]) == 0
    assert path.read_text() == NOTEBOOKS[0].read_text()


# --- nothing is ever lost -------------------------------------------------------------------

def test_refuses_to_write_into_the_sources(tmp_path):
    for out in (tmp_path, tmp_path / "student"):
        with pytest.raises(GradingError, match="refusing to write into"):
            refuse_inside(out, tmp_path)
    refuse_inside(tmp_path.parent / "student", tmp_path)


def test_never_overwrites_a_changed_file(tmp_path):
    assert write_all(tmp_path, {"a.ipynb": b"stub"}) == [tmp_path / "a.ipynb"]
    assert write_all(tmp_path, {"a.ipynb": b"new stub"}) == [tmp_path / "a.ipynb"]  # untouched
    (tmp_path / "a.ipynb").write_bytes(b"a learner's answer")
    (tmp_path / "b.ipynb").write_bytes(b"not ours")
    with pytest.raises(GradingError, match=r"a.ipynb.*--force"):
        write_all(tmp_path, {"a.ipynb": b"stub", "c.ipynb": b"x"})
    assert (tmp_path / "a.ipynb").read_bytes() == b"a learner's answer"
    assert not (tmp_path / "c.ipynb").exists()  # all or nothing
    with pytest.raises(GradingError, match=r"b\.ipynb"):
        write_all(tmp_path, {"b.ipynb": b"stub"})
    write_all(tmp_path, {"a.ipynb": b"stub"}, force=True)
    assert (tmp_path / "a.ipynb").read_bytes() == b"stub"
    assert json.loads((tmp_path / MANIFEST).read_text())["a.ipynb"]


def test_student_command_refuses_the_book_folder(tmp_path):
    run = subprocess.run([sys.executable, "-m", "tpviz.grading.release", str(BOOK), str(BOOK)],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "refusing to write into" in run.stderr
    assert sum(BEGIN in p.read_text() for p in NOTEBOOKS) == len(NOTEBOOKS)


# --- the student copies, as nbgrader releases them ------------------------------------------

@pytest.fixture(scope="module")
def released(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    release(BOOK, out)
    return out


def _cells(nb):
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def _secret_lines(nb: dict) -> set[str]:
    """Lines of the solution regions and worked answers that appear nowhere else."""
    secret, public = set(), set()
    for kind, text in _cells(nb):
        if kind == "code":
            regions = re.findall(rf"{BEGIN}\n(.*?){END}", text, re.S)
            rest = re.sub(rf"{BEGIN}\n.*?{END}", "", text, flags=re.S)
        else:
            answer = r"```\{admonition\} Answer\n(.*?)```|<details>\s*<summary>Answer</summary>(.*?)</details>"
            regions = ["".join(r) for r in re.findall(answer, text, re.S)]
            rest = re.sub(answer, "", text, flags=re.S)
        secret |= {ln.strip() for r in regions for ln in r.splitlines()}
        public |= {ln.strip() for ln in rest.splitlines()}
    secret -= public
    return {ln for ln in secret if ln and not ln.startswith("def ") and ln != ":class: dropdown"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_solution_text_reaches_students(path, released):
    nb = json.loads(path.read_text())
    secret = _secret_lines(nb)
    assert secret
    student = json.loads((released / path.name).read_text())
    lines = {ln.strip() for _, text in _cells(student) for ln in text.splitlines()}
    assert not secret & lines
    assert not any(BEGIN in text or "{admonition} Answer" in text or "<summary>Answer" in text
                   for _, text in _cells(student))
    # the check cells are locked and carry their points
    checks = [c for c in student["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
    assert checks and all(c["metadata"]["editable"] is False for c in checks)


def test_rerunning_keeps_a_learners_work(released, tmp_path):
    mine = released / NOTEBOOKS[0].name
    original = mine.read_bytes()
    assert release(BOOK, released, [NOTEBOOKS[0].stem]) == []  # unchanged: not rewritten
    mine.write_bytes(original.replace(b"= ...", b"= 42"))
    with pytest.raises(GradingError, match="--force"):
        release(BOOK, released, [NOTEBOOKS[0].stem])
    assert b"= 42" in mine.read_bytes()
    # make lab: the changed copy is kept, the others are written (here: a missing one)
    other = released / NOTEBOOKS[1].name
    other.unlink()
    written = release(BOOK, released, [NOTEBOOKS[0].stem, NOTEBOOKS[1].stem], keep_changed=True)
    assert written == [other] and b"= 42" in mine.read_bytes()
    mine.write_bytes(original)


def _names(source: str) -> tuple[set[str], set[str], set[str]]:
    """Names a code cell binds at its top level, names it reads anywhere, and names it calls."""
    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln
                     for ln in source.splitlines())
    tree = ast.parse(code)
    bound = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            bound |= {n.id for n in ast.walk(node)
                      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    called = {n.func.id for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return bound, read, called


def _answer_problems(nb: dict) -> tuple[list[str], int]:
    """Cells of a student copy that would break on a stub answer, and the number of checks."""
    answers: dict[str, str] = {}  # name bound by an answer cell -> that exercise
    problems, checks = [], 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        meta = cell["metadata"].get("nbgrader", {})
        bound, read, called = _names("".join(cell["source"]))
        if meta.get("solution"):
            answers.update(dict.fromkeys(bound, meta["grade_id"]))
        elif meta.get("grade"):
            checks += 1
            problems += [f"{meta['grade_id']} calls the answer {n}()" for n in called & set(answers)]
        else:
            problems += [f"a cell after {answers[n]} reads its answer {n!r}"
                         for n in sorted((read - bound) & set(answers))]
            for n in bound:
                answers.pop(n, None)
    return problems, checks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_an_unattempted_chapter_depends_on_no_answer(path, released):
    """A student copy runs top to bottom saying "not attempted yet" when no cell but the check
    cells reads an answer's names, and a check cell only passes them to its checker (a stub is
    never called before the checker sees it: the checker reports it, see tests/test_exercises.py).
    Read from the code; the grading class (tests/test_grading_class.py) also executes the student
    copies of two chapters untouched."""
    problems, checks = _answer_problems(json.loads((released / path.name).read_text()))
    assert checks >= 3
    assert not problems, problems


def test_a_cell_reading_an_answer_is_found():
    def cell(source, **nbgrader):
        return {"cell_type": "code", "source": source, "metadata": {"nbgrader": nbgrader}}

    answer = cell("def f(x):\n    raise NotImplementedError\nk = ...", solution=True,
                  grade_id="ex1_answer")
    check = cell("tpviz.exercises.check_f(f, k)", grade=True, grade_id="ex1")
    assert _answer_problems({"cells": [answer, check]}) == ([], 1)
    called = cell("tpviz.exercises.check_f(f(2))", grade=True, grade_id="ex1")
    later = cell("print(k + 1)")
    rebound = cell("k = 3\nprint(k + 1)")
    assert _answer_problems({"cells": [answer, called, later, rebound, later]}) == (
        ["ex1 calls the answer f()", "a cell after ex1_answer reads its answer 'k'"], 1)


def test_notebooks_anywhere_are_found_or_reported(tmp_path):
    from tpviz.grading.grade import find_submissions

    for rel in ("ada/05_zero.ipynb", "ada/old/05_zero.ipynb", "eve smith/hw/10_moe.ipynb",
                "loose.ipynb", "bob/.ipynb_checkpoints/05_zero-checkpoint.ipynb"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    found, notes = find_submissions(tmp_path)
    assert found == {"ada": {"05_zero": tmp_path / "ada/05_zero.ipynb"},
                     "eve smith": {"10_moe": tmp_path / "eve smith/hw/10_moe.ipynb"}}
    assert "loose.ipynb: a notebook in no student's folder; not graded" in notes[""][0]
    assert "a second 05_zero.ipynb in ada's folder; not graded" in notes["ada"][0]
    assert "found in a sub-folder; graded as eve smith's 10_moe" in notes["eve smith"][0]
