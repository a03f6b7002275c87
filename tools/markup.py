"""The chapters' notebook-wide markup, written by one script so that it can run again at any time.

A learner reads a chapter in JupyterLab, Colab, VS Code or the built book. MyST's roles and
directives render only in the book (JupyterLab shows "{cite}`key`" and two monospace blocks
for a Question/Answer admonition), so the chapters carry markup every front end reads, and
this script writes it:

- the **install cell** (the first code cell): ``FIRST_CELL``, pinned to the book's version
  (``v`` + ``tpviz.__version__``; the published student copies pin the built commit);
- **citations**: ``{cite}`a,b``` becomes ``[[Author et al., 2021a](<book>/references.html#a);
  [Other, 2020](<book>/references.html#b)]``: the label the references list gives the work
  (its a, b, c included), linked to its entry in the online book (the build makes the link
  local). Existing links get their label again, so a new work of the same author and year
  relabels them when the script runs;
- **worked questions**: an ``{admonition} Answer`` becomes ``<details><summary>Answer
  </summary>`` ... ``</details>`` (collapsed in every front end; its Markdown and maths render
  inside), an ``{admonition} Question ...`` a paragraph that starts with the bold title, a
  ``{note}`` a quotation starting "**Note.**";
- **links to the book's own pages** (``references.md``, ``notation.md``, a chapter's
  ``.ipynb``) point to the online book (a relative link leads nowhere on Colab).

Usage, from the repository's root (the pinned environment: citations need pybtex)::

    python tools/markup.py            # rewrite every chapter in book/ that needs it
    python tools/markup.py --check    # list what would change; exit 1 if anything would

Applying it twice changes nothing. ``tests/test_markup.py`` fails when a chapter is not in
this form.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
BIB = ROOT / "references.bib"


@functools.cache
def config() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "_config.yml").read_text())


def book_url() -> str:
    """The online book's chapters, e.g. ``https://tpviz.github.io/tpviz/book/``."""
    return config()["html"]["baseurl"].rstrip("/") + "/book/"


def references_url() -> str:
    return book_url() + "references.html"


def version() -> str:
    """tpviz's version, read from its source (the script runs without importing tpviz)."""
    text = (ROOT / "src" / "tpviz" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


# --- the install cell ---------------------------------------------------------------------------

# The first code cell of every chapter, exactly; {url} is _config.yml's repository URL and {ref}
# the version it installs. It installs tpviz only where it is missing (pyproject.toml's ranges
# admit Colab's versions, so there it installs tpviz alone), says in one line what it did and
# which JAX it found, ends with a plain message if the install failed, and then chooses the
# devices every later cell uses.
FIRST_CELL = """\
# Installs tpviz where it is missing (e.g. on Colab); keeps the runtime's JAX and ipywidgets.
try:
    import tpviz

    installed = "tpviz was already installed"
except ImportError:
    %pip install --quiet "tpviz @ git+{url}@{ref}"
    try:
        import tpviz
    except ImportError as e:
        raise RuntimeError(
            f"tpviz {ref} could not be installed ({e}). pip's messages above say why; check "
            "that this runtime can reach github.com, then run this cell again.") from None
    installed = f"installed tpviz {tpviz.__version__}"
print(f"{installed}; found {tpviz.compat.versions()}.")

devices = tpviz.setup_devices(8)  # 8 accelerators if present, else 8 emulated CPU devices
assert len(devices) == 8"""


def first_cell(ref: str | None = None) -> str:
    """The install cell, pinned to ``ref`` (default: the tag of tpviz's version)."""
    ref = ref or f"v{version()}"
    return FIRST_CELL.replace("{url}", config()["repository"]["url"]).replace("{ref}", ref)


def is_install_cell(source: str) -> bool:
    """A chapter's first code cell that sets up the devices (the house's install cell, or a new
    chapter's own first version of it)."""
    return "tpviz.setup_devices(" in source


# --- citations ----------------------------------------------------------------------------------

@functools.cache
def labels() -> dict[str, str]:
    """Each work's key -> its label in the book's references list (letters included)."""
    sys.path.insert(0, str(ROOT / "web"))
    import tpviz_book

    return tpviz_book.citation_labels(BIB)


def anchor(key: str) -> str:
    """The id of the work's entry on the references page (``bibtex_cite_id: "{key}"``, which
    docutils' ``make_id`` turns into an id; the same rule for a BibTeX key where docutils is
    not installed: lower case, other characters runs of "-", no leading digit or "-")."""
    try:
        from docutils.nodes import make_id
    except ImportError:  # the colab and newest test environments (no book tools)
        text = re.sub(r"[^a-z0-9]+", "-", " ".join(key.lower().split()))
        return re.sub(r"^[-0-9]+|-+$", "", text)
    return make_id(key)


_CITE = re.compile(r"\{cite(?::p)?\}`([^`]+)`")


def cite(text: str, names: dict[str, str]) -> str:
    """``{cite}`a,b``` -> ``[[A, 2020](…#a); [B, 2021](…#b)]`` (unknown keys are errors)."""
    def one(m: re.Match) -> str:
        keys = [k.strip() for k in m.group(1).split(",") if k.strip()]
        missing = [k for k in keys if k not in names]
        if missing:
            raise KeyError(f"{', '.join(missing)}: not in references.bib")
        return "[" + "; ".join(f"[{names[k]}]({references_url()}#{anchor(k)})"
                               for k in keys) + "]"

    return _CITE.sub(one, text)


def relabel(text: str, names: dict[str, str]) -> str:
    """Every link to a references entry gets the entry's label as its text."""
    by_anchor = {anchor(k): label for k, label in names.items()}
    link = re.compile(r"\[([^\[\]]+)\]\(" + re.escape(references_url()) + r"#([\w-]+)\)")

    def one(m: re.Match) -> str:
        if m.group(2) not in by_anchor:
            raise KeyError(f"#{m.group(2)}: no entry of references.bib has this anchor")
        return f"[{by_anchor[m.group(2)]}]({references_url()}#{m.group(2)})"

    return link.sub(one, text)


def cited(text: str) -> list[str]:
    """The anchors of the references entries ``text`` links to."""
    return re.findall(re.escape(references_url()) + r"#([\w-]+)\)", text)


# --- worked questions and notes -----------------------------------------------------------------

_OPEN = re.compile(r"^(`{3,}|:{3,})\{(admonition|note)\}[ \t]*(.*)$")
_OPTION = re.compile(r"^:[\w-]+:")


def admonitions(text: str) -> str:
    """Answer admonitions -> ``<details>``; Question admonitions -> a bold title; notes -> a
    quotation. Only top-level fences are read (an answer holds no fenced block)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        fence, kind, title = m.group(1), m.group(2), m.group(3).strip()
        try:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == fence)
        except StopIteration:
            raise ValueError(f"the {{{kind}}} at {lines[i]!r} has no closing {fence}") from None
        body = lines[i + 1:end]
        while body and _OPTION.match(body[0]):  # :class: dropdown and the like
            body = body[1:]
        out += _replacement(kind, title, body)
        i = end + 1
    return "\n".join(out)


def _replacement(kind: str, title: str, body: list[str]) -> list[str]:
    if kind == "note":
        return [("> **Note.** " if k == 0 else "> ") + line if line.strip() else ">"
                for k, line in enumerate(body)]
    if title.lower().startswith("answer"):
        return ["<details>", f"<summary>{title}</summary>", "", *body, "", "</details>"]
    head = title if title.endswith(("?", ".", "!")) else title + "."
    if not body:
        return [f"**{head}**"]
    return [f"**{head}** {body[0]}", *body[1:]]


# --- links to the book's pages ------------------------------------------------------------------

_LOCAL = re.compile(r"\]\(((?:\d\d_[\w-]+\.ipynb)|(?:[a-z_]+\.md))(#[\w-]+)?\)")


def local_links(text: str) -> str:
    """``](notation.md)`` or ``](08_async_pipelines.ipynb)`` -> the page in the online book."""
    def one(m: re.Match) -> str:
        page = m.group(1).rsplit(".", 1)[0] + ".html"
        return f"]({book_url()}{page}{m.group(2) or ''})"

    return _LOCAL.sub(one, text)


# --- a whole notebook ---------------------------------------------------------------------------

def markdown(text: str, names: dict[str, str] | None) -> str:
    """One markdown cell in the house's form (``names=None``: citations left unlabelled, for
    environments without pybtex; they are then only checked)."""
    text = local_links(admonitions(text))
    if names is not None:
        text = relabel(cite(text, names), names)
    return text


def transform(nb: dict, names: dict[str, str] | None) -> dict:
    """The notebook in the house's form (a new dict; each cell's id and layout kept)."""
    nb = json.loads(json.dumps(nb))
    first = True
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and first:
            first = False
            if is_install_cell(source):
                source = first_cell()
        elif cell["cell_type"] == "markdown":
            source = markdown(source, names)
        else:
            continue
        cell["source"] = (source.splitlines(keepends=True) if isinstance(cell["source"], list)
                          else source)
    return nb


def dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks (default: every chapter in book/)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a "
                        "notebook is not in the house's form")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
    names = labels()
    stale = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        new = dump(transform(json.loads(text), names))
        if new == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(new, encoding="utf-8")
        print(f"{path}: {'would be rewritten' if args.check else 'rewritten'}")
    if not stale:
        print(f"{len(paths)} notebooks already in the house's form")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
