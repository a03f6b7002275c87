"""Write the student version of the notebooks: solutions replaced by stubs.

In a chapter notebook the learner's code sits between ``# BEGIN SOLUTION`` and ``# END SOLUTION``
lines. The student version keeps everything else and replaces each such block by a stub that
defines the same names: ``name = ...`` for a value, a function that raises ``NotImplementedError``
for a function. The checkers report both as "not attempted yet". Worked answers (``<details>``
blocks whose summary says "Answer", or MyST's ``{admonition} Answer``) become a one-line note;
cells tagged ``solution`` are dropped.

These functions are the stub of nbgrader's ``generate_assignment`` (see
:mod:`tpviz.grading.nbgrader_plugins`): the student version is always what nbgrader releases
(write it with ``python -m tpviz.grading.release book student``, :mod:`tpviz.grading.release`).
"""

from __future__ import annotations

import ast
import re
import textwrap

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
TODO = "# TODO: your code here"


def _names(target: ast.expr) -> list[str]:
    """The names an assignment target binds, one each: ``(a, b)`` gives a and b (a tuple stub
    ``(a, b) = ...`` would fail to unpack the ``...``)."""
    if isinstance(target, ast.Tuple | ast.List):
        return [n for e in target.elts for n in _names(e)]
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return [ast.unparse(target)]


def _stub(block: str) -> list[str]:
    """Stub lines defining the names that ``block`` (dedented source) defines."""
    lines: list[str] = []
    for node in ast.parse(block).body:
        if isinstance(node, ast.FunctionDef):
            head = ast.get_source_segment(block, node).splitlines()[0]
            lines += [head, f"    {TODO}",
                      '    raise NotImplementedError("exercise not attempted yet")']
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n for t in targets for n in _names(t)]
            lines.append(f"{' = '.join(names)} = ...  {TODO}")
    return lines or [TODO, 'raise NotImplementedError("exercise not attempted yet")']


def strip_solutions(source: str) -> str:
    """Replace every BEGIN/END SOLUTION block of a code cell by its stub."""
    out: list[str] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() != BEGIN:
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        try:
            j = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == END)
        except StopIteration:
            raise ValueError(f"a '{BEGIN}' line has no '{END}' line after it") from None
        block = textwrap.dedent("\n".join(lines[i + 1 : j]))
        out += [indent + s for s in _stub(block)]
        i = j + 1
    return "\n".join(out)


WORKED_ANSWER_STUB = "*Answer: work it out first; your instructor has the worked answer.*"
_FENCE = re.compile(r"^\s*(`{3,}|:{3,})\{admonition\}\s*Answer\b")
_DETAILS = re.compile(r"^\s*<details\b[^>]*>\s*(.*)$", re.I)
_SUMMARY = re.compile(r"^\s*<summary\b[^>]*>(.*?)</summary>", re.I | re.S)


def _answer_summary(rest: list[str]) -> bool:
    """Whether the ``<details>`` block whose lines follow starts with an "Answer" summary."""
    text = "\n".join(rest[:3]).lstrip()
    m = _SUMMARY.match(text)
    return bool(m) and re.sub(r"<[^>]+>|\*", "", m.group(1)).strip().lower().startswith("answer")


def strip_worked_answers(markdown: str) -> str:
    """Replace every worked answer by a one-line note: a ``<details>`` block whose summary says
    "Answer" (the chapters' form, tools/markup.py), or a fenced ``{admonition} Answer`` block
    (the MyST form, before the markup script runs)."""
    lines = markdown.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        details = _DETAILS.match(line)
        if fence:
            end = next((j for j in range(i + 1, len(lines))
                        if lines[j].strip() == fence.group(1)), None)
            if end is None:
                raise ValueError("a worked answer ('{admonition} Answer') has no closing fence")
        elif details and _answer_summary([details.group(1), *lines[i + 1:]]):
            end, depth = None, 0
            for j in range(i, len(lines)):
                depth += len(re.findall(r"<details\b", lines[j], re.I))
                depth -= len(re.findall(r"</details>", lines[j], re.I))
                if depth <= 0:
                    end = j
                    break
            if end is None:
                raise ValueError("a worked answer ('<details>' with an Answer summary) has no "
                                 "closing '</details>'")
        else:
            out.append(line)
            i += 1
            continue
        out.append(WORKED_ANSWER_STUB)
        i = end + 1
    return "\n".join(out)


def is_worked_answer_cell(cell: dict) -> bool:
    """A cell tagged ``solution`` (dropped whole from the student version)."""
    return "solution" in cell.get("metadata", {}).get("tags", [])
