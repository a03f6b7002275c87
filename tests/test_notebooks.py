"""House rules of the chapter notebooks (the chapters themselves run as tests: conftest.py).

Run as a script (`python tests/test_notebooks.py`), it writes FIRST_CELL into every chapter
whose first code cell is an install cell (one that calls tpviz.setup_devices).
"""

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())

# The first code cell of every chapter, exactly; {url} is _config.yml's repository URL. It
# installs tpviz only where it is missing (pyproject.toml's ranges admit Colab's versions, so
# there it installs tpviz alone), says in one line what it did and which JAX it found, and then
# chooses the devices every later cell uses.
FIRST_CELL = """\
# Installs tpviz where it is missing (e.g. on Colab); keeps the runtime's JAX and ipywidgets.
try:
    import tpviz

    installed = "tpviz was already installed"
except ImportError:
    %pip install --quiet "tpviz @ git+{url}"
    import tpviz

    installed = f"installed tpviz {tpviz.__version__}"
print(f"{installed}; found {tpviz.compat.versions()}.")

devices = tpviz.setup_devices(8)  # 8 accelerators if present, else 8 emulated CPU devices
assert len(devices) == 8"""


def first_cell() -> str:
    return FIRST_CELL.replace("{url}", CONFIG["repository"]["url"])


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
                                   "tests/test_notebooks.py; run `python tests/test_notebooks.py`")
    urls = re.findall(r"git\+(\S+?)\"", first)
    assert urls == [CONFIG["repository"]["url"]], "the install cell must use _config.yml's URL"


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
    bib = (ROOT / "references.bib").read_text()
    text = "".join("".join(c["source"]) for c in cells(path, "markdown"))
    for group in re.findall(r"\{cite[tp]?\}`([^`]+)`", text):
        for key in group.split(","):
            assert f"{{{key.strip()}," in bib, key


def test_the_bibliography_parses_without_duplicates():
    pybtex = pytest.importorskip("pybtex.database", reason="pybtex comes with the book's tools (make test); the colab and newest environments test the library")

    text = (ROOT / "references.bib").read_text()
    keys = re.findall(r"^@\w+\{([^,]+),", text, re.M)
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert len(pybtex.parse_string(text, "bibtex").entries) == len(keys)


def write_first_cells() -> None:
    """Replace the install cell (the first code cell) of every chapter with FIRST_CELL."""
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
        if "tpviz.setup_devices(" not in "".join(cell["source"]):
            print(f"{path.name}: first code cell is not an install cell; left alone")
            continue
        cell["source"] = first_cell().splitlines(keepends=True)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        print(f"{path.name}: first cell written")


if __name__ == "__main__":
    write_first_cells()
