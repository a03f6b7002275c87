"""The book's publishing: the GitHub Actions workflow is valid YAML that builds the book, tests
it in the browser and deploys _build/html to GitHub Pages; the README gives the address set in
_config.yml; notebook code lines fit the book's width."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
INSTALL_CELL = "# Installs tpviz where it is missing"  # the house's fixed first cell


def test_workflow_builds_and_deploys_the_book():
    flow = yaml.safe_load((ROOT / ".github/workflows/book.yml").read_text())
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads the key `on` as True
    assert "push" in on and on["push"]["branches"] == ["main"]
    assert flow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    build, deploy = flow["jobs"]["build"], flow["jobs"]["deploy"]
    runs = [s.get("run", "") for s in build["steps"]]
    uses = {s.get("uses", "").split("@")[0]: s for s in build["steps"]}
    assert "make book" in runs and "make test-book" in runs
    assert runs.index("make book") < runs.index("make test-book")
    assert uses["actions/upload-pages-artifact"]["with"]["path"] == "_build/html"
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]


def test_the_launch_buttons_open_the_branch_the_workflow_publishes_the_student_version_to():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    branch = config["repository"]["branch"]
    assert branch != "main"  # main holds the solutions
    job = yaml.safe_load((ROOT / ".github/workflows/book.yml").read_text())["jobs"]["student"]
    assert job["needs"] == "build" and job["permissions"] == {"contents": "write"}
    script = "\n".join(s.get("run", "") for s in job["steps"])
    assert 'tools/student_branch.py _build/student-branch --commit "$GITHUB_SHA"' in script
    assert f"--initial-branch {branch}" in script and script.rstrip().count(branch) >= 2


def test_the_student_branch_holds_no_solution_and_pins_the_built_commit(tmp_path):
    pytest.importorskip("nbgrader", reason="the instructor extra: pip install -e '.[instructor]'")
    sys.path.insert(0, str(ROOT / "tools"))
    import student_branch

    commit = "0123456789abcdef0123456789abcdef01234567"
    chapter = "02_hardware"
    student_branch.write(tmp_path, commit, [chapter])
    nb = json.loads((tmp_path / "book" / f"{chapter}.ipynb").read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    source = (ROOT / "book" / f"{chapter}.ipynb").read_text()
    assert "# BEGIN SOLUTION" in source and "<summary>Answer" in source
    assert "# BEGIN SOLUTION" not in text and "<summary>Answer" not in text
    first = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert f'"tpviz @ git+{url}@{commit}"' in first
    assert (tmp_path / "binder" / "requirements.txt").read_text().endswith(
        f"tpviz @ git+{url}@{commit}\n")
    overrides = json.loads((tmp_path / "binder" / "overrides.json").read_text())
    assert overrides["@jupyter-widgets/jupyterlab-manager:plugin"]["saveState"] is True
    assert sorted(p.name for p in (tmp_path / "book").iterdir()) == [f"{chapter}.ipynb"]


def test_readme_gives_the_address_set_in_config():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["html"]["baseurl"]
    assert url.startswith("https://") and url.endswith("/")
    assert url in (ROOT / "README.md").read_text()


# Code lines over 88 characters still left in chapters that other work is editing (trailing
# comments were moved above their lines; these need rewording). The count may only go down.
STILL_LONG = {"00_devices_meshes_shardings": 2}


def test_notebook_code_lines_fit_the_page():
    """No horizontal scrolling: code lines <= 88 characters (the house's fixed install cell,
    checked word for word by test_notebooks.py, is the one exception)."""
    over = []
    for nb in sorted((ROOT / "book").glob("*.ipynb")):
        long = []
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or source.startswith(INSTALL_CELL):
                continue
            long += [f"{nb.name} cell {i}: {line}" for line in source.splitlines()
                     if len(line) > 88]
        if len(long) > STILL_LONG.get(nb.stem, 0):
            over += long
    assert not over, "lines over 88 characters:\n" + "\n".join(over)


def test_works_of_one_author_and_year_are_told_apart_in_the_text():
    pytest.importorskip("pybtex", reason="the book's build tools (make book's environment)")
    sys.path.insert(0, str(ROOT / "web"))
    import tpviz_book

    def entry(ident, label):
        return (f'<div class="citation" id="{ident}" role="doc-biblioentry">\n<span class="label">'
                f'<span class="fn-bracket">[</span>{label}<span class="fn-bracket">]</span></span>')

    references = (entry("id13", "Narayanan et al., 2021a") + entry("id8", "Narayanan et al., 2021b")
                  + entry("id2", "Huang et al., 2019"))
    letters = tpviz_book.year_letters(references)
    assert letters == {"id13": "a", "id8": "b"}
    page = ('<a class="reference internal" href="references.html#id8" title="t">Narayanan '
            '<em>et al.</em>, 2021</a> and <a class="reference internal" href="#id13">Narayanan '
            '<em>et al.</em>, 2021</a>, <a class="reference internal" href="references.html#id2">'
            'Huang <em>et al.</em>, 2019</a>, <a class="reference internal" href="05_zero.html#id8">'
            'chapter 5</a>')
    on_references = page.replace("2021</a> and", "2021b</a> and").replace("2021</a>, <a",
                                                                          "2021a</a>, <a")
    assert tpviz_book.cite_letters(page, letters, references_page=True) == on_references
    # on another page a bare #id13 is that page's own element: left alone
    assert tpviz_book.cite_letters(page, letters) == page.replace("2021</a> and", "2021b</a> and")


def _book_extension():
    pytest.importorskip("pybtex", reason="the book's build tools (make book's environment)")
    sys.path.insert(0, str(ROOT / "web"))
    import tpviz_book

    return tpviz_book


def test_links_to_the_online_book_become_local_and_citations_are_checked():
    tpviz_book = _book_extension()
    base = yaml.safe_load((ROOT / "_config.yml").read_text())["html"]["baseurl"]
    references = ('<div class="citation" id="li2014scaling" role="doc-biblioentry">\n<span '
                  'class="label"><span class="fn-bracket">[</span>Li <em>et al.</em>, 2014<span '
                  'class="fn-bracket">]</span></span>\n<p>Mu Li and others. <em>Scaling</em> '
                  'distributed ML. 2014.</p>\n</div>')
    entries = tpviz_book.reference_entries(references)
    assert entries == {"li2014scaling": ("Li et al., 2014", "Mu Li and others. Scaling "
                                                            "distributed ML. 2014.")}

    def link(page, words):
        return f'<a class="reference external" href="{base}book/{page}">{words}</a>'

    page = (link("references.html#li2014scaling", "Li et al., 2014") + " "
            + link("notation.html", "notation") + " " + '<a class="reference external" '
            'href="https://example.org/book/x.html">elsewhere</a>')
    local, problems = tpviz_book.book_links(page, base, "", entries)
    assert problems == []
    assert ('<a class="reference internal" href="references.html#li2014scaling" title="Mu Li '
            'and others. Scaling distributed ML. 2014.">Li et al., 2014</a>') in local
    assert '<a class="reference internal" href="notation.html">notation</a>' in local
    assert 'href="https://example.org/book/x.html"' in local  # other sites stay as they are
    from_root, _ = tpviz_book.book_links(link("notation.html", "n"), base, "book/", entries)
    assert 'href="book/notation.html"' in from_root
    # a stale letter and a missing entry are the build's warnings (-W: errors)
    _, problems = tpviz_book.book_links(link("references.html#li2014scaling", "Li et al., 2014a")
                                        + link("references.html#gone2020", "Gone, 2020"), base,
                                        "", entries)
    assert len(problems) == 2 and "labelled 'Li et al., 2014'" in problems[0]
    assert "#gone2020, which is no entry" in problems[1]


def test_the_build_draws_an_explorers_live_figure_from_its_output():
    tpviz_book = _book_extension()
    pytest.importorskip("myst_nb")
    from myst_nb.core import render
    from myst_nb.core.render import MimeData

    tpviz_book._register_live_renderer()
    tpviz_book._register_live_renderer()  # once only, however often Sphinx loads it
    assert render.load_mime_renders().count(tpviz_book.LiveRenderer) == 1
    payload = {"figure": "tpviz.machines.explore:LIVE_ROOFLINE", "name": "render_roofline",
               "starts": {"chip": "B200", "eight_bit": True, "batch": 512}}
    (node,) = tpviz_book.LiveRenderer.handle_mime(None, MimeData(tpviz_book.LIVE_MIME, payload),
                                                  False)
    assert node["format"] == "html" and 'data-name="render_roofline"' in node.astext()
    assert tpviz_book.LiveRenderer.handle_mime(None, MimeData("image/png", ""), False) is None
    from tpviz.core.widgets import LIVE_MIME

    assert tpviz_book.LIVE_MIME == LIVE_MIME


def _tag_step() -> str:
    job = yaml.safe_load((ROOT / ".github/workflows/book.yml").read_text())["jobs"]["student"]
    (step,) = [s["run"] for s in job["steps"] if s.get("name", "").startswith("Tag this")]
    return step


@pytest.mark.parametrize("change, warned", [("src", True), ("book", False)])
def test_the_tag_step_warns_when_the_library_changed_without_a_new_version(
        tmp_path, change, warned):
    """The workflow's tag step, run in a clone of a repository whose origin already has the
    version's tag: a change under src/ without a new version (the chapters' install cells
    would install the older tpviz) is warned about; a change elsewhere is not."""
    import os
    import subprocess

    def git(*args, cwd):
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                              text=True).stdout

    work, origin = tmp_path / "work", tmp_path / "origin.git"
    (work / "src" / "tpviz").mkdir(parents=True)
    (work / "book").mkdir()
    (work / "src" / "tpviz" / "__init__.py").write_text("__version__ = '1.2.0'\n")
    (work / "book" / "a.md").write_text("a\n")
    git("init", "-q", "-b", "main", str(work), cwd=tmp_path)
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    git("add", "-A", cwd=work)
    git(*ident, "commit", "-qm", "first", cwd=work)
    git("init", "-q", "--bare", "-b", "main", str(origin), cwd=tmp_path)
    git("remote", "add", "origin", str(origin), cwd=work)
    git("tag", "v1.2.0", cwd=work)
    git("push", "-q", "origin", "main", "v1.2.0", cwd=work)
    clone = tmp_path / "clone"
    git("clone", "-q", "--depth", "1", f"file://{origin}", str(clone), cwd=tmp_path)
    if git("tag", "-l", cwd=clone):  # actions/checkout fetches no tags
        git("tag", "-d", "v1.2.0", cwd=clone)
    target = clone / ("src/tpviz/ops.py" if change == "src" else "book/a.md")
    target.write_text("changed\n")
    git("add", "-A", cwd=clone)
    git(*ident, "commit", "-qm", "second", cwd=clone)
    env = {**os.environ, "PYTHONPATH": str(clone / "src")}
    run = subprocess.run(["bash", "-e", "-c", _tag_step()], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert ("::warning::src/ changed since v1.2.0" in run.stdout) is warned, run.stdout
