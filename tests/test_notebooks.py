"""House rules of the chapter notebooks (the chapters themselves run as tests: conftest.py).

The install cell (the first code cell) is ``FIRST_CELL`` of tools/markup.py, the script that
writes every notebook-wide markup; run as a script (`python tests/test_notebooks.py`), this file
still writes it (through that script) into every chapter.
"""

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
sys.path.insert(0, str(ROOT / "tools"))
import markup  # noqa: E402

FIRST_CELL = markup.FIRST_CELL


def first_cell() -> str:
    return markup.first_cell()


def cells(path, kind="code"):
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == kind]


def test_there_are_chapters():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(path):
    dirty = [i for i, c in enumerate(cells(path)) if c["outputs"] or c["execution_count"]]
    assert not dirty, f"{path.name}: clear the outputs of code cells {dirty}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_installs_and_sets_up_devices(path):
    first = "".join(cells(path)[0]["source"])
    assert first == first_cell(), (f"{path.name}: the first code cell must be FIRST_CELL of "
                                   "tools/markup.py; run `python tools/markup.py`")
    urls = re.findall(r"git\+(\S+?)@(\S+?)\"", first)
    # the repository of _config.yml, at the tag of this version (not the default branch's head)
    assert urls == [(CONFIG["repository"]["url"], f"v{markup.version()}")]


def test_the_install_cell_ends_in_a_clear_message_when_pip_fails(monkeypatch):
    """pip's failure (no network, a wrong pin) ends in one sentence, not a ModuleNotFoundError
    after pip's output: the cell runs as IPython runs it, with %pip doing nothing and tpviz
    missing."""
    from IPython.core.inputtransformer2 import TransformerManager

    code = TransformerManager().transform_cell(first_cell())
    pip_calls = []

    class Shell:
        def run_line_magic(self, name, line):
            pip_calls.append((name, line))  # pip "ran" and failed: nothing installed

    monkeypatch.setitem(sys.modules, "tpviz", None)  # import tpviz -> ImportError
    with pytest.raises(RuntimeError) as error:
        exec(code, {"get_ipython": Shell})
    assert pip_calls == [("pip", f'install --quiet "tpviz @ git+{CONFIG["repository"]["url"]}'
                                 f'@v{markup.version()}"')]
    message = str(error.value)
    assert message.startswith(f"tpviz v{markup.version()} could not be installed")
    assert "pip's messages above say why" in message and "run this cell again" in message
    assert error.value.__suppress_context__  # no "During handling of ..." chain


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_chapter_is_in_the_toc(path):
    toc = (ROOT / "_toc.yml").read_text()
    assert f"book/{path.stem}" in toc


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_check_follows_a_solution(path):
    code = cells(path)
    for i, cell in enumerate(code):
        if "tpviz.exercises.check_" in "".join(cell["source"]):
            assert "# BEGIN SOLUTION" in "".join(code[i - 1]["source"]), f"cell {i}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_citation_is_in_the_bibliography(path):
    """Each citation links to the references entry of a work in references.bib."""
    bib = (ROOT / "references.bib").read_text()
    anchors = {markup.anchor(k) for k in re.findall(r"^@\w+\{([^,]+),", bib, re.M)}
    text = "".join("".join(c["source"]) for c in cells(path, "markdown"))
    for anchor in markup.cited(text):
        assert anchor in anchors, anchor


def test_the_bibliography_parses_without_duplicates():
    pybtex = pytest.importorskip("pybtex.database", reason="pybtex comes with the book's tools (make test); the colab and newest environments test the library")

    text = (ROOT / "references.bib").read_text()
    keys = re.findall(r"^@\w+\{([^,]+),", text, re.M)
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert len(pybtex.parse_string(text, "bibtex").entries) == len(keys)


if __name__ == "__main__":
    sys.exit(markup.main([]))
