"""The student version: solutions replaced by stubs, nothing leaks, unattempted work runs."""

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tpviz.grading.student import BEGIN, END, strip_solutions, student_notebook

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))


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


def _solution_lines(nb: dict) -> set[str]:
    lines: set[str] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            for block in re.findall(rf"{BEGIN}\n(.*?){END}", "".join(cell["source"]), re.S):
                lines |= {ln.strip() for ln in block.splitlines()
                          if ln.strip() and not ln.strip().startswith("def ")}
        elif "solution" in cell.get("metadata", {}).get("tags", []):
            lines |= {ln.strip() for ln in "".join(cell["source"]).splitlines() if len(ln) > 20}
    return lines


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_solution_text_leaks(path):
    nb = json.loads(path.read_text())
    secret = _solution_lines(nb)
    student = json.dumps(student_notebook(nb))
    leaked = [line for line in secret if json.dumps(line)[1:-1] in student]
    assert not leaked
    assert BEGIN not in student


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_unattempted_chapter_runs_and_says_not_attempted(path):
    nb = nbformat.from_dict(student_notebook(json.loads(path.read_text())))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(BOOK)}}).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                      for o in c.outputs)
    checks = sum("tpviz.exercises.check_" in c.source for c in nb.cells if c.cell_type == "code")
    assert checks >= 3
    assert printed.count("not attempted yet") == checks
    assert "✗" not in printed
