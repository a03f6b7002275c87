"""House rules of the chapter notebooks (their cells themselves run under nbval)."""

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())


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
    assert "tpviz.setup_devices(" in first and "assert len(devices)" in first
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
    import pybtex.database

    text = (ROOT / "references.bib").read_text()
    keys = re.findall(r"^@\w+\{([^,]+),", text, re.M)
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert len(pybtex.database.parse_string(text, "bibtex").entries) == len(keys)
