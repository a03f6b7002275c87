"""Write the student version of the notebooks: solutions replaced by stubs.

In a chapter notebook the learner's code sits between ``# BEGIN SOLUTION`` and ``# END SOLUTION``
lines. The student version keeps everything else and replaces each such block by a stub that
defines the same names: ``name = ...`` for a value, a function that raises ``NotImplementedError``
for a function. The checkers report both as "not attempted yet". Markdown cells tagged
``solution`` (worked answers) are dropped, and outputs are cleared.

Usage: ``python -m tpviz.grading.student book _build/student``
"""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
TODO = "# TODO: your code here"


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
            lines += [f"{ast.unparse(t)} = ...  {TODO}" for t in targets]
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


def student_notebook(nb: dict) -> dict:
    """The student version of a notebook (a dict in nbformat 4 JSON)."""
    cells = []
    for cell in nb["cells"]:
        if "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        cell = dict(cell)
        if cell["cell_type"] == "code":
            cell["source"] = strip_solutions("".join(cell["source"]))
            cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
    return {**nb, "cells": cells}


def main(argv: list[str]) -> None:
    src, dst = Path(argv[0]), Path(argv[1])
    dst.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("*.ipynb")):
        nb = student_notebook(json.loads(path.read_text()))
        (dst / path.name).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {dst / path.name}")


if __name__ == "__main__":
    main(sys.argv[1:])
