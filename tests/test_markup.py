"""The chapters' markup reads in every front end (tools/markup.py writes it; these tests fail
when a chapter breaks it): no MyST role or directive in a markdown cell, citations as linked
text whose words are the references list's label, worked answers in <details>, the pinned
install cell; and the script's transformations themselves."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
sys.path.insert(0, str(ROOT / "tools"))
import markup  # noqa: E402

REF = markup.references_url()
# what JupyterLab and Colab show raw: a role such as {cite}`key`, a directive's fence, an option
MYST = re.compile(r"\{[a-z][\w:-]*\}`|^\s*(`{3,}|:{3,})\{[a-z][\w-]*\}|^:class:", re.M)


def _names():
    pytest.importorskip("pybtex", reason="citation labels need the book's tools (make test)")
    return markup.labels()


def _markdown(path):
    cells = json.loads(path.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_myst_markup_in_a_chapter(path):
    raw = [(i, m.group(0)) for i, text in _markdown(path) for m in MYST.finditer(text)]
    assert not raw, f"{path.name}: MyST markup other front ends show raw: {raw[:5]}; run " \
                    "`python tools/markup.py`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_worked_answer_collapses(path):
    """Every <details> block is closed and says Answer (the student version removes those)."""
    for i, text in _markdown(path):
        opened, closed = len(re.findall(r"<details\b", text)), text.count("</details>")
        assert opened == closed, f"{path.name} cell {i}: unbalanced <details>"
        summaries = re.findall(r"<details>\n<summary>(.*?)</summary>\n\n", text)
        assert len(summaries) == opened, f"{path.name} cell {i}: a <details> without a summary " \
                                         "line followed by a blank line (Markdown inside)"
        assert all(s.startswith("Answer") for s in summaries), (path.name, i, summaries)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_is_in_the_scripts_form(path):
    """Running tools/markup.py would change nothing: citations carry their labels (a, b
    letters included), the install cell is pinned."""
    nb = json.loads(path.read_text())
    assert markup.transform(nb, _names()) == nb, f"{path.name}: run `python tools/markup.py`"


def test_citations_read_as_linked_labels():
    names = {"austin2025scaling": "Austin et al., 2025", "li2014scaling": "Li et al., 2014"}
    out = markup.cite("GSPMD {cite}`austin2025scaling` and {cite}`li2014scaling, austin2025scaling`.",
                      names)
    assert out == (f"GSPMD [[Austin et al., 2025]({REF}#austin2025scaling)] and "
                   f"[[Li et al., 2014]({REF}#li2014scaling); "
                   f"[Austin et al., 2025]({REF}#austin2025scaling)].")
    with pytest.raises(KeyError, match="nosuchkey"):
        markup.cite("{cite}`nosuchkey`", names)


def test_a_new_work_of_the_same_author_and_year_relabels_the_text():
    text = f"[[Narayanan et al., 2021]({REF}#narayanan2021memory)]"
    names = {"narayanan2021memory": "Narayanan et al., 2021a"}
    assert markup.relabel(text, names) == f"[[Narayanan et al., 2021a]({REF}#narayanan2021memory)]"
    with pytest.raises(KeyError):
        markup.relabel(f"[x]({REF}#gone)", names)


def test_anchors_are_docutils_ids_with_or_without_docutils(monkeypatch):
    keys = ["austin2025scaling", "Smith_2020", "nvidia2023h100", "a:b-c"]
    expected = ["austin2025scaling", "smith-2020", "nvidia2023h100", "a-b-c"]  # docutils' rule
    assert [markup.anchor(k) for k in keys] == expected
    monkeypatch.setitem(sys.modules, "docutils.nodes", None)  # as in the colab environment
    assert [markup.anchor(k) for k in keys] == expected


def test_the_labels_are_the_references_lists():
    """Works of one author and year get a, b, c in the order the references list sorts them."""
    names = _names()
    assert names["narayanan2021pipedream2bw"] == "Narayanan et al., 2021a"  # "Memory-efficient ..."
    assert names["narayanan2021megatron"] == "Narayanan et al., 2021b"  # "Efficient large-scale ..."
    assert len(set(names.values())) == len(names)


def test_worked_questions_become_details_bold_titles_and_quotes():
    md = ("Text.\n\n```{admonition} Question 1.2 — fewer bytes, or fewer steps?\nWhen is the tree "
          "faster?\n```\n```{admonition} Answer\n:class: dropdown\nFor small $V$: $2\\log_2 K$ "
          "steps.\n```\n\n```{note}\nSymbols change.\n\nSee below.\n```\n```{admonition} Question"
          "\nWhy $x$?\n```")
    assert markup.admonitions(md) == (
        "Text.\n\n**Question 1.2 — fewer bytes, or fewer steps?** When is the tree faster?\n"
        "<details>\n<summary>Answer</summary>\n\nFor small $V$: $2\\log_2 K$ steps.\n\n"
        "</details>\n\n> **Note.** Symbols change.\n>\n> See below.\n**Question.** Why $x$?")
    with pytest.raises(ValueError, match="no closing"):
        markup.admonitions("```{admonition} Answer\nsecret")


def test_links_to_the_books_pages_lead_to_the_online_book():
    book = markup.book_url()
    assert markup.local_links("the [notation](notation.md) page, [Chapter 8]"
                              "(08_async_pipelines.ipynb), [x](https://a.b/c.md)") == (
        f"the [notation]({book}notation.html) page, [Chapter 8]({book}08_async_pipelines.html)"
        ", [x](https://a.b/c.md)")


def test_the_script_changes_nothing_the_second_time():
    nb = {"cells": [
        {"cell_type": "code", "source": ["# Installs tpviz ...\n", "tpviz.setup_devices(8)"],
         "metadata": {}, "outputs": [], "execution_count": None, "id": "a"},
        {"cell_type": "markdown", "source": "See {cite}`austin2025scaling`.\n\n```{admonition} "
         "Answer\n:class: dropdown\n$x$\n```", "metadata": {}, "id": "b"}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    names = {"austin2025scaling": "Austin et al., 2025"}
    once = markup.transform(nb, names)
    assert markup.transform(once, names) == once
    assert once["cells"][0]["source"] == markup.first_cell().splitlines(keepends=True)
    assert isinstance(once["cells"][1]["source"], str)  # each cell keeps its layout
    assert once["cells"][1]["id"] == "b"
