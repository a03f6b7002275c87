"""A submission made ready to run: the release's check cells in place, every change named.

The exercises of a chapter come from its release (the student version nbgrader wrote, which
the grading process trusts): each check cell's ``grade_id``, points, checker and the
expressions it passes, and the source of its answer cells. In the submission every cell that
looks like a check cell (it calls a checker, or carries a check cell's ``grade_id``) is
removed, and the release's check cells are put back after each exercise's answer cells. What
the learner changed is reported cell by cell, never scored as a zero for the notebook: an edited
or deleted check cell, a changed ``grade_id``, an answer cell marked as graded.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from dataclasses import dataclass, field

from tpviz.grading.metadata import CHECK_CALL, source

CHECKER = re.compile(r"^check_\w+$")

# Where the release's stub alone does not say how an answer is graded (see Exercise.takes_code).
# make test checks both lists against every chapter's own answers (conftest.py, ChapterRun):
# checkers whose answer is an object that plain data cannot carry, and whose stub defines no
# function: the dicts of torch's ParallelStyle objects (ColwiseParallel(), ...) that 13.4 and
# 13.7 took before they asked for a style of the learner's own (a class: a code exercise);
OBJECT_ANSWERS = frozenset({"check_tp_plan", "check_sp_plan"})
# design exercises whose stub defines helper functions but whose answer is plain data.
PLAIN_ANSWERS = frozenset({"check_bucket_size", "check_zero_design", "check_mesh_design",
                           "check_memory_cap", "check_design", "check_draft_length"})


@dataclass(frozen=True)
class Exercise:
    grade_id: str
    points: float
    checker: str
    args: list[str]
    kwargs: dict[str, str]
    check_cell: dict  # the release's
    answer_source: str  # the release's (the stub)

    @property
    def takes_code(self) -> bool:
        """Whether the answer may be code, graded by running it (a function exercise): decided
        by the release, never by the submission. Its stub defines a function or class (a build
        exercise; not a design whose helpers make a plain answer, :data:`PLAIN_ANSWERS`), or its
        checker takes objects (:data:`OBJECT_ANSWERS`); any other answer is plain data, judged
        by a process that never runs the learner's code."""
        if self.checker in OBJECT_ANSWERS:
            return True
        return self.checker not in PLAIN_ANSWERS and defines_code(self.answer_source)


def defines_code(text: str) -> bool:
    """Whether Python source ``text`` defines a function or a class (anywhere in it)."""
    from tpviz.grading.capture import transformed

    try:
        tree = ast.parse(transformed(text))
    except SyntaxError:
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
               for n in ast.walk(tree))


@dataclass
class Prepared:
    notebook: dict
    exercises: list[dict]  # for the runner: grade_id, index, checker, args, kwargs, source
    notes: list[str] = field(default_factory=list)
    untouched: set[str] = field(default_factory=set)  # answers still the release's stub


def _meta(cell: dict) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def _call(text: str) -> tuple[str, list[str], dict[str, str]]:
    """The checker a check cell calls and the expressions of its arguments."""
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and CHECKER.match(node.func.attr)):
            return (node.func.attr, [ast.unparse(a) for a in node.args],
                    {k.arg: ast.unparse(k.value) for k in node.keywords if k.arg})
    raise ValueError(f"no checker call in {text!r}")


def exercises_of(release: dict) -> list[Exercise]:
    """The graded exercises of a released chapter, in order."""
    out, answers = [], {}
    for cell in release["cells"]:
        meta = _meta(cell)
        if meta.get("solution"):
            answers.setdefault(meta["grade_id"].split("_answer")[0], []).append(source(cell))
        elif meta.get("grade"):
            checker, args, kwargs = _call(source(cell))
            out.append(Exercise(meta["grade_id"], float(meta.get("points", 0)), checker, args,
                                kwargs, copy.deepcopy(cell),
                                "\n\n".join(answers.get(meta["grade_id"], []))))
    return out


def _answer_of(cell: dict, ids: set[str]) -> str | None:
    gid = str(_meta(cell).get("grade_id", ""))
    base = gid.split("_answer")[0]
    return base if "_answer" in gid and base in ids else None


MAX_DEPTH = 64  # levels of JSON nesting; a notebook of Jupyter's needs fewer than 10
TOO_DEEP = f"the file is not a Jupyter notebook (JSON nested over {MAX_DEPTH} levels deep)"


def _depth(value) -> int:
    """How deeply ``value`` (parsed JSON) nests lists and dicts (no recursion: a deep one is
    the point)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        value, level = todo.pop()
        if isinstance(value, (list, dict)):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                break
            todo.extend((v, level + 1) for v in (value.values() if isinstance(value, dict)
                                                 else value))
    return deepest


def _check_structure(nb) -> None:
    """Raise ``ValueError`` naming the first part of ``nb`` that no Jupyter notebook has: what
    :func:`prepare`, the runner and the feedback page take apart must be what they expect."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("the file is not a Jupyter notebook (no list of cells)")
    if _depth(nb) > MAX_DEPTH:
        raise ValueError(TOO_DEEP)
    if not isinstance(nb.get("metadata", {}), dict):
        raise ValueError("the file is not a Jupyter notebook (its metadata is not a mapping)")
    for n, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise ValueError(f"the file is not a Jupyter notebook (cell {n} is not a code, "
                             "markdown or raw cell)")
        text = cell.get("source", "")
        if not (isinstance(text, str) or (isinstance(text, list) and all(
                isinstance(line, str) for line in text))):
            raise ValueError(f"the file is not a Jupyter notebook (the source of cell {n} is "
                             "not text)")
        if not isinstance(cell.get("metadata", {}), dict):
            raise ValueError(f"the file is not a Jupyter notebook (the metadata of cell {n} "
                             "is not a mapping)")
        if not isinstance(cell.get("outputs", []), list):
            raise ValueError(f"the file is not a Jupyter notebook (the outputs of cell {n} "
                             "are not a list)")


def prepare(data: bytes, release: dict) -> Prepared:
    """The notebook to run for a submission (its bytes) of the chapter ``release``.

    Raises:
        ValueError: the file is not a notebook (nothing of it can be graded).
    """
    try:
        nb = json.loads(data)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
    _check_structure(nb)
    exercises = exercises_of(release)
    ids = {e.grade_id for e in exercises}
    by_source = {source(e.check_cell).strip(): e.grade_id for e in exercises}
    notes: list[str] = []
    cells, removed = [], {}  # removed: grade_id -> position among the kept cells
    for n, cell in enumerate(nb["cells"]):
        cell.setdefault("metadata", {})
        cell.setdefault("source", "")
        text, meta = source(cell), _meta(cell)
        gid = str(meta.get("grade_id", ""))
        calls = cell["cell_type"] == "code" and CHECK_CALL.search(text) is not None
        if calls or (meta.get("grade") and not meta.get("solution") and gid in ids):
            known = gid if gid in ids else by_source.get(text.strip())
            if known and gid != known:
                notes.append(f"cell {n}: its grade_id was changed from {known!r} to {gid!r}; "
                             f"graded as {known}")
            elif known and text.strip() != source(
                    next(e for e in exercises if e.grade_id == known).check_cell).strip():
                notes.append(f"cell {n}: the check cell of {known} was edited; the original "
                             "was put back")
            if known:
                removed.setdefault(known, len(cells))
            continue  # any other checker call of the learner's is dropped too
        if meta.get("grade") and cell["cell_type"] == "code":
            notes.append(f"cell {n} ({gid or 'no grade_id'}) is marked as graded, but it is not "
                         "a check cell; it runs as an ordinary cell")
        cells.append(cell)
    out, ready, previous = list(cells), [], -1
    for ex in exercises:
        answer_at = [i for i, c in enumerate(out) if _answer_of(c, ids) == ex.grade_id]
        if answer_at:
            at = answer_at[-1] + 1
        elif ex.grade_id in removed:
            at = removed[ex.grade_id] + len(ready)  # where it was, after the cells put back
        else:
            at = previous + 1 if previous >= 0 else len(out)
        at = max(at, previous + 1)
        if ex.grade_id not in removed:
            notes.append(f"the check cell of {ex.grade_id} was missing; it was put back")
        if not answer_at:
            notes.append(f"no answer cell of {ex.grade_id} found (its grade_id "
                         f"{ex.grade_id}_answer was changed or the cell deleted); the cells "
                         "before its check cell are taken as the answer")
        spans = [c for c in out[previous + 1:at] if c["cell_type"] == "code"]
        answer_cells = [out[i] for i in answer_at] or spans
        out.insert(at, copy.deepcopy(ex.check_cell))
        previous = at
        answer = "\n\n".join(source(c) for c in answer_cells)
        ready.append({"grade_id": ex.grade_id, "index": at, "checker": ex.checker,
                      "args": ex.args, "kwargs": ex.kwargs, "source": answer})
    for r in ready:  # positions moved by later insertions
        r["index"] = next(i for i, c in enumerate(out) if _meta(c).get("grade_id") == r[
            "grade_id"] and _meta(c).get("grade") and CHECK_CALL.search(source(c)))
    untouched = {r["grade_id"] for r, ex in zip(ready, exercises, strict=True)
                 if r["source"].strip() == ex.answer_source.strip()}
    nb["cells"] = out
    return Prepared(nb, ready, notes, untouched)
