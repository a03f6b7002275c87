"""The two pieces of tpviz that nbgrader loads: our stub for its solution clearing, and a
per-exercise grade export. (Imports nbgrader: install the ``instructor`` extra.)

- :class:`StubSolutions` replaces nbgrader's ``ClearSolutions`` in ``generate_assignment``:
  each ``# BEGIN SOLUTION`` region becomes a stub defining the same names (so the check cells
  say "not attempted yet" instead of raising ``NameError``), worked answers in markdown become a
  one-line note, and cells tagged ``solution`` are dropped.
- :class:`ResilientExecute` replaces nbgrader's ``Execute`` in ``autograde``: a cell that times
  out and leaves the kernel stuck (compiled code ignores the interrupt) scores 0, the kernel is
  restarted and the cells before it replayed, and grading goes on; a check cell that printed
  "not attempted yet" scores 0 whatever the submission did to the grading mode.
- :class:`ExerciseCsv` is an ``nbgrader export`` plugin writing one row per student, chapter
  and exercise: ``student,chapter,exercise,points,max_points``.

In a course's ``nbgrader_config.py``::

    from tpviz.grading.nbgrader_plugins import configure
    configure(c)
"""

from __future__ import annotations

import copy
import csv
import time

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbgrader.plugins import ExportPlugin
from nbgrader.preprocessors import ClearSolutions, Execute
from nbgrader.utils import is_grade, is_solution

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


NOT_ATTEMPTED = "not attempted yet"  # tpviz.core.exercises.NOT_ATTEMPTED (not imported: JAX)
TIMEOUT_NAME = "CellTimeoutError"  # nbgrader's error for a cell that ran past the timeout
PROBE_S = 10  # after a timeout: how long a kernel that survived the interrupt has to answer


def timed_out(cell) -> bool:
    return any(o.get("output_type") == "error" and o.get("ename") == TIMEOUT_NAME
               for o in cell.get("outputs", []))


def _says_not_attempted(cell) -> bool:
    return any(o.get("output_type") == "stream" and f"{NOT_ATTEMPTED}." in o.get("text", "")
               for o in cell.get("outputs", []))


class ResilientExecute(Execute):
    """nbgrader's Execute, made to lose nothing: after a cell times out, a kernel that does not
    answer within :data:`PROBE_S` (stuck in compiled code) is restarted and the cells before
    the stuck one are replayed (check cells excepted), so the rest of the notebook is graded;
    a check cell whose checker said "not attempted yet" gets an error (0 points)."""

    def preprocess(self, nb, resources=None, km=None):
        self._ran: list[int] = []  # code cells that finished, in order: replayed after a restart
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
            stuck = False
        except (CellTimeoutError, DeadKernelError) as e:  # no reply or no output: restart
            cell.outputs.append(NotebookNode(
                output_type="error", ename=TIMEOUT_NAME, evalue=str(e).splitlines()[0],
                traceback=[f"{TIMEOUT_NAME}: {str(e).splitlines()[0]}"]))
            stuck = True
        if cell.cell_type != "code":
            return cell, resources
        if timed_out(cell):
            if stuck or not self._answers():
                self._restart_and_replay()
        else:
            self._ran.append(index)
        if is_grade(cell) and not is_solution(cell) and _says_not_attempted(cell):
            cell.outputs.append(NotebookNode(
                output_type="error", ename="NotAttempted", evalue=NOT_ATTEMPTED,
                traceback=[f"NotAttempted: {NOT_ATTEMPTED} (0 points)"]))
        return cell, resources

    def _answers(self) -> bool:
        """Whether the kernel runs a trivial cell within PROBE_S."""
        msg_id = self.kc.execute("None", silent=True, store_history=False)
        deadline = time.monotonic() + PROBE_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = run_sync(self.kc.shell_channel.get_msg)(timeout=left)
            except Exception:  # queue.Empty: no answer in time
                return False
            if msg["parent_header"].get("msg_id") == msg_id:
                return True
        return False

    def _restart_and_replay(self) -> None:
        self.log.warning("the kernel is stuck after a timeout: restarting it and replaying "
                         "%d cells", len(self._ran))
        run_sync(self.km.restart_kernel)(now=True)
        run_sync(self.kc.wait_for_ready)(timeout=self.startup_timeout)
        for index in self._ran:
            original = self.nb.cells[index]
            if is_grade(original) and not is_solution(original):
                continue  # a check cell defines nothing later cells need
            replay = copy.deepcopy(original)
            try:
                self.execute_cell(replay, index, store_history=False)
            except (CellTimeoutError, DeadKernelError):
                break  # it ran before: give up replaying, grade what is left
            if timed_out(replay):
                break


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


def grades_of(database, chapter: str, student: str) -> list[tuple[str, float, float]]:
    """``(exercise, points, max_points)`` of one submission, in the chapter's order, read from
    the gradebook at ``database`` (a path); empty if nbgrader did not grade it."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{database}") as gradebook:
        try:
            assignment = gradebook.find_assignment(chapter)
            notebook = assignment.notebooks[0]
            order = [c.name for c in notebook.grade_cells]
            sub = gradebook.find_submission_notebook(notebook.name, chapter, student)
        except (MissingEntry, IndexError):
            return []
        return [(g.name, _number(g.score), _number(g.max_score))
                for g in sorted(sub.grades, key=lambda g: order.index(g.name))]


def _number(x: float | None) -> int | float:
    x = float(x or 0)
    return int(x) if x.is_integer() else round(x, 2)


def configure(c, *, timeout: int = 120) -> None:
    """Configure nbgrader (``c`` = ``get_config()``) for the tpviz chapters: our stub, a
    per-cell timeout in seconds, and grading mode for the checkers (a stub answer scores 0)."""
    import os

    from nbgrader.converters import Autograde, GenerateAssignment

    os.environ["TPVIZ_GRADING"] = "1"  # the kernels nbgrader starts inherit it
    c.GenerateAssignment.preprocessors = [
        StubSolutions if p is ClearSolutions else p
        for p in GenerateAssignment.class_traits()["preprocessors"].default()]
    c.Autograde.autograde_preprocessors = [
        ResilientExecute if p is Execute else p
        for p in Autograde.class_traits()["autograde_preprocessors"].default()]
    c.Execute.timeout = c.ResilientExecute.timeout = timeout
    c.Execute.interrupt_on_timeout = c.ResilientExecute.interrupt_on_timeout = True
    c.ClearSolutions.enforce_metadata = True
