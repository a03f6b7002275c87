"""The two pieces of tpviz that nbgrader loads: our stub for its solution clearing, and a
per-exercise grade export. (Imports nbgrader: install the ``instructor`` extra.)

- :class:`StubSolutions` replaces nbgrader's ``ClearSolutions`` in ``generate_assignment``:
  each ``# BEGIN SOLUTION`` region becomes a stub defining the same names (so the check cells
  say "not attempted yet" instead of raising ``NameError``), worked answers in markdown become a
  one-line note, and cells tagged ``solution`` are dropped.
- :class:`ExerciseCsv` is an ``nbgrader export`` plugin writing one row per student, chapter
  and exercise: ``student,chapter,exercise,points,max_points``.

In a course's ``nbgrader_config.py``::

    from tpviz.grading.nbgrader_plugins import configure
    configure(c)
"""

from __future__ import annotations

import csv

from nbgrader.plugins import ExportPlugin
from nbgrader.preprocessors import ClearSolutions

from tpviz.grading.student import (
    BEGIN,
    is_worked_answer_cell,
    strip_solutions,
    strip_worked_answers,
)


class StubSolutions(ClearSolutions):
    """nbgrader's ClearSolutions with tpviz's stubs: names stay defined, worked answers go."""

    def _replace_solution_region(self, cell, language) -> bool:
        if cell.cell_type == "code":
            replaced = any(line.strip() == BEGIN for line in cell.source.splitlines())
            if replaced:
                cell.source = strip_solutions(cell.source)
            return replaced
        if cell.cell_type == "markdown":
            cell.source = strip_worked_answers(cell.source)
        return False

    def preprocess(self, nb, resources):
        nb.cells = [c for c in nb.cells if not is_worked_answer_cell(c)]
        return super().preprocess(nb, resources)


class ExerciseCsv(ExportPlugin):
    """``nbgrader export --exporter=tpviz.grading.nbgrader_plugins.ExerciseCsv``: one row per
    student, chapter (assignment) and exercise (graded cell), ordered as in the chapter."""

    def export(self, gradebook) -> None:
        dest = self.to or "grades.csv"
        rows = []
        for assignment in gradebook.assignments:
            if self.assignment and assignment.name not in self.assignment:
                continue
            for notebook in assignment.notebooks:
                order = [c.name for c in notebook.grade_cells]
                for student in gradebook.students:
                    if self.student and student.id not in self.student:
                        continue
                    try:
                        sub = gradebook.find_submission_notebook(
                            notebook.name, assignment.name, student.id)
                    except Exception:
                        continue
                    for grade in sorted(sub.grades, key=lambda g: order.index(g.name)):
                        rows.append([student.id, assignment.name, grade.name,
                                     _number(grade.score), _number(grade.max_score)])
        rows.sort(key=lambda r: (r[0], r[1]))
        with open(dest, "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(["student", "chapter", "exercise", "points", "max_points"])
            writer.writerows(rows)
        self.log.info("Wrote %d grades to %s", len(rows), dest)


def _number(x: float | None) -> int | float:
    x = float(x or 0)
    return int(x) if x.is_integer() else round(x, 2)


def configure(c, *, timeout: int = 120) -> None:
    """Configure nbgrader (``c`` = ``get_config()``) for the tpviz chapters: our stub, a
    per-cell timeout in seconds, and grading mode for the checkers (a stub answer scores 0)."""
    import os

    from nbgrader.converters import GenerateAssignment

    os.environ["TPVIZ_GRADING"] = "1"  # the kernels nbgrader starts inherit it
    c.GenerateAssignment.preprocessors = [
        StubSolutions if p is ClearSolutions else p
        for p in GenerateAssignment.class_traits()["preprocessors"].default()]
    c.Execute.timeout = timeout
    c.Execute.interrupt_on_timeout = True
    c.ClearSolutions.enforce_metadata = True
