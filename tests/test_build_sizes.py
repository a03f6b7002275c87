"""Issue 39, gap 3: a "build" exercise asks for several steps of logic, not one substitution.

A build's solution (between ``# BEGIN SOLUTION`` and ``# END SOLUTION``, in the cell before its
check) must hold at least :data:`LEAST` statements of logic: every statement counts, nested ones
too, except ``def``, imports, ``pass``, docstrings and a bare ``return`` of a name. The builds
below that are known to fall short are listed, not approved: each is to be upgraded or
relabelled, and the test fails once one is fixed, so that the list only shrinks."""

import ast
import json
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
HEADING = re.compile(r"\*\*Exercise (\d+\.\d+) — [^*]*\((easy|medium|hard), "
                     r"(one-line|multi-step|build|design)\)\.\*\*")
LEAST = 3
# known short builds (issue 39's audit, gap 3): to upgrade or relabel
SHORT: dict[str, str] = {}


def statements(source: str) -> int:
    """Statements of logic in a solution (see the module docstring)."""
    skip = (ast.FunctionDef, ast.Import, ast.ImportFrom, ast.Pass)
    count = 0
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt) or isinstance(node, skip):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name | type(None)):
            continue
        count += 1
    return count


def builds() -> dict[str, int]:
    """Each build exercise's number and the statements of its book solution."""
    found = {}
    for path in NOTEBOOKS:
        cells, heading = json.loads(path.read_text())["cells"], None
        for i, cell in enumerate(cells):
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown" and (m := HEADING.search(text)):
                heading = m.groups()
            elif (cell["cell_type"] == "code" and "tpviz.exercises.check_" in text and heading
                  and heading[2] == "build" and heading[0] not in found):
                solution = "".join(cells[i - 1]["source"])
                body = solution.split("# BEGIN SOLUTION")[-1].split("# END SOLUTION")[0]
                found[heading[0]] = statements(textwrap.dedent(body))  # may sit in a class
    return found


def test_statements_are_counted():
    assert statements("def f(x):\n    return x @ w\n") == 1
    assert statements("def f(x):\n    y = g(x)\n    return y\n") == 1
    assert statements("specs = {\n 'a': 1,\n 'b': 2,\n}\n") == 1
    assert statements("for i in r:\n    x = x + i\nout = x\n") == 3


@pytest.fixture(scope="module")
def solutions():
    found = builds()
    assert len(found) >= 30  # the audit counted 32 builds
    return found


def test_every_build_has_several_statements(solutions):
    short = {k: n for k, n in solutions.items() if n < LEAST and k not in SHORT}
    assert not short, f"builds of fewer than {LEAST} statements (relabel or upgrade): {short}"


def test_the_known_short_builds_are_still_short(solutions):
    """When one is upgraded or relabelled, take it off SHORT (empty since 13.7's upgrade)."""
    stale = [n for n in sorted(SHORT) if not (n in solutions and solutions[n] < LEAST)]
    assert not stale, f"{stale}: remove them from SHORT"
