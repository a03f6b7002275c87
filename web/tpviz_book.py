"""Sphinx helper for the book: what the built pages need beyond Jupyter Book's defaults.

- Each page lists a script once. sphinx-thebe 0.3.1 and sphinx-togglebutton add their inline
  configuration (``const THEBE_JS_URL = ...``) each time Jupyter Book reads the sources; a page
  then declares the constant twice and the browser reports an error. After the build, drop each
  repeated ``<script>`` line of a page's head.
- Every figure's alt text says what it shows: a notebook's output image gets its caption's words
  (myst-nb writes the image's file path there), and an image without a caption the words of the
  paragraph before its cell's code.
- Figures are numbered per chapter ("Fig. 7.3": chapter 7's third figure), in captions and in
  the references to them (Sphinx numbers them through the whole book when the toc is not
  numbered, and a numbered toc would number the chapters from 1, not as their files are).
- The references list labels each work as the text cites it ("Huang et al., 2019", not
  "[HCB+19]"), and its web addresses and arXiv numbers are links. Works with the same author
  and year get a, b, c after the year in the list (the label style) and in every citation of
  them in the text (sphinxcontrib-bibtex's author-year citations write the year alone).
- The chapters link to the online book (their citations, the notation page: links that work
  in JupyterLab and Colab too; ``tools/markup.py`` writes them). In the built book these links
  become local, a citation gets its entry's full text as a tooltip, and a citation whose words
  differ from its entry's label in the references list (a stale a/b letter) or whose entry
  does not exist is a warning: the build with -W fails.
- An explorer's output names its live figure (``application/vnd.tpviz.live+json``, see
  ``tpviz.core.widgets``); the build draws it here (``tpviz.core.live.book_html``), so that
  the kernel builds no HTML for the book and saved notebooks stay small. myst-nb finds such
  renderers through its ``myst_nb.mime_renderers`` entry points; this extension adds itself
  to that list when Sphinx loads it (:func:`_register_live_renderer`).
"""

from __future__ import annotations

import functools
import html
import os
import re
from pathlib import Path

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)


class AuthorYearLabels(BaseLabelStyle):
    """Labels as ``bibtex_reference_style: author_year`` cites: "Austin et al., 2025"."""

    def format_labels(self, sorted_entries):
        """Each entry's label; works with the same label get a, b, c after the year."""
        labels = [self._label(entry) for entry in sorted_entries]
        seen: dict[str, int] = {}
        for label in labels:
            if labels.count(label) == 1:
                yield label
            else:
                seen[label] = seen.get(label, 0) + 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]

    @staticmethod
    def _label(entry) -> str:
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [" ".join(p.last_names) or " ".join(p.first_names) for p in people]
        names = [re.sub(r"[{}]", "", n) for n in names]
        if not names:
            who = re.sub(r"[{}]", "", entry.fields.get("title", entry.key))[:30]
        elif len(names) == 1:
            who = names[0]
        elif len(names) == 2:
            who = f"{names[0]} and {names[1]}"
        else:
            who = f"{names[0]} et al."
        return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearStyle(UnsrtStyle):
    default_label_style = "tpviz-author-year"
    default_sorting_style = "author_year_title"


register_plugin("pybtex.style.labels", "tpviz-author-year", AuthorYearLabels)
register_plugin("pybtex.style.formatting", "tpviz", AuthorYearStyle)


def citation_labels(bibfile) -> dict[str, str]:
    """Each work's key -> its label in the references list ("Narayanan et al., 2021a"), as
    sphinxcontrib-bibtex labels the ``:all:`` bibliography with this style: the entries sorted
    by the style, then labelled in that order (letters where author and year repeat).
    ``tools/markup.py`` writes these labels into the chapters' citations."""
    from pybtex.database.input.bibtex import Parser

    entries = Parser("utf-8-sig").parse_file(str(bibfile)).entries
    style = AuthorYearStyle()
    ordered = list(style.sort(entries.values()))
    return {entry.key: label for entry, label in zip(ordered, style.format_labels(ordered),
                                                     strict=True)}

_IMG = re.compile(r'<img([^>]*?)alt="([^"]*)"([^>]*)>')
_TAGS = re.compile(r"<[^>]+>")


def _words(fragment: str, limit: int = 300) -> str:
    """Plain words of an HTML fragment (maths as its TeX, tags dropped), at most ``limit``."""
    text = re.sub(r'<a class="headerlink"[^>]*>.*?</a>', "", fragment, flags=re.S)
    text = re.sub(r"<(br|/p|/div|/li)\b[^>]*>", " ", text)
    text = html.unescape(_TAGS.sub("", text))
    text = re.sub(r"\\\(|\\\)|\\\[|\\\]|\$", "", text)
    text = re.sub(r"\\math\w+\{([^}]*)\}", r"\1", text).replace("\\cdot", "·")
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"^Fig\. \d+(\.\d+)* ", "", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"


def _is_path(alt: str) -> bool:
    """An alt text that is empty or a file's name or path (myst-nb writes the path)."""
    return not alt.strip() or re.fullmatch(r"\S*[/\\]\S*|\S+\.(png|gif|svg|jpe?g)", alt.strip())


def alt_texts(body: str) -> str:
    """Give every image whose alt text is empty or a path the words of its figure's caption,
    else of the text before it."""
    out, last = [], 0
    for m in _IMG.finditer(body):
        if not _is_path(m.group(2)):
            continue
        after = body[m.end():m.end() + 4000]
        cap = re.search(r"<figcaption>(.*?)</figcaption>", after, re.S)
        end_fig = after.find("</figure>")
        if cap and (end_fig < 0 or cap.start() < end_fig) and "<img" not in after[:cap.start()]:
            words = _words(cap.group(1))
        else:
            before = body[max(0, m.start() - 6000):m.start()]
            paras = re.findall(r"<p>(.*?)</p>", before, re.S)
            words = "Figure: " + _words(paras[-1]) if paras else "Figure drawn by the code above"
        out.append(body[last:m.start()])
        out.append(f'<img{m.group(1)}alt="{html.escape(words, quote=True)}"{m.group(3)}>')
        last = m.end()
    out.append(body[last:])
    return "".join(out)


_URL = re.compile(r'(?<![">])(https?://[^\s<,;]+[^\s<,;.)])')
_ARXIV = re.compile(r"arXiv:(\d{4}\.\d{4,5})")


def reference_links(body: str) -> str:
    """Web addresses and arXiv numbers in the references list as links."""
    start = body.find('class="citation')
    if start < 0:
        return body
    head, refs = body[:start], body[start:]
    refs = _URL.sub(r'<a href="\1">\1</a>', refs)
    refs = _ARXIV.sub(r'<a href="https://arxiv.org/abs/\1">arXiv:\1</a>', refs)
    return head + refs


_LIST_LABEL = re.compile(r'<div class="citation" id="([^"]+)"[^>]*>\s*<span class="label">'
                         r'<span class="fn-bracket">\[</span>[^<]*?, \d{4}([a-z])<')
_CITATION = re.compile(r'(<a class="reference internal" href="(references\.html)?#([^"]+)"'
                       r'[^>]*>)([^<]*(?:<em>[^<]*</em>[^<]*)?\d{4})(</a>)')


def year_letters(references: str) -> dict[str, str]:
    """The references list's entry id -> the letter after its year ("2021a": "a"), for the
    works whose label has one."""
    return dict(_LIST_LABEL.findall(references))


def cite_letters(body: str, letters: dict[str, str], references_page: bool = False) -> str:
    """Each in-text citation of such a work gets its letter after the year (a link to
    ``references.html#id…``, or to ``#id…`` on the references page itself)."""
    def letter(m: re.Match) -> str:
        ours = m.group(2) or references_page
        return m.group(1) + m.group(4) + (letters.get(m.group(3), "") if ours else "") + m.group(5)

    return _CITATION.sub(letter, body) if letters else body


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(_TAGS.sub("", fragment))).strip()


def reference_entries(references: str) -> dict[str, tuple[str, str]]:
    """The references page's entry id -> (its label, its text)."""
    found = re.findall(r'<div class="citation" id="([^"]+)"[^>]*>\s*<span class="label">'
                       r'<span class="fn-bracket">\[</span>(.*?)<span class="fn-bracket">\]'
                       r"</span></span>\s*<p>(.*?)</p>", references, re.S)
    return {ident: (_text(label), _text(text)) for ident, label, text in found}


def book_links(body: str, base: str, prefix: str, entries: dict[str, tuple[str, str]]
               ) -> tuple[str, list[str]]:
    """Links to the online book (``base`` + ``book/page.html``) made local (``prefix`` leads
    from the page to ``book/``); a link to a references entry gets the entry's text as its
    tooltip and is checked: the entry exists and the link's words are its label. Returns the
    page and its problems."""
    problems = []
    link = re.compile(r'<a class="reference external" href="' + re.escape(base) +
                      r'book/([\w-]+\.html)(#[\w-]+)?">(.*?)</a>', re.S)

    def local(m: re.Match) -> str:
        page, fragment, words = m.group(1), m.group(2) or "", m.group(3)
        title = ""
        if page == "references.html" and fragment:
            entry = entries.get(fragment[1:])
            if entry is None:
                problems.append(f"a citation links to {fragment}, which is no entry of the "
                                "references list")
            else:
                if _text(words) != entry[0]:
                    problems.append(f"a citation reads {_text(words)!r} but its entry is "
                                    f"labelled {entry[0]!r}: run python tools/markup.py")
                title = f' title="{html.escape(entry[1], quote=True)}"'
        return (f'<a class="reference internal" href="{prefix}{page}{fragment}"{title}>'
                f"{words}</a>")

    return link.sub(local, body), problems


def _scripts_once(head: str) -> str:
    seen, kept = set(), []
    for line in head.split("\n"):
        script = line.strip()
        if script.startswith("<script") and script.endswith("</script>"):
            if script in seen:
                continue
            seen.add(script)
        kept.append(line)
    return "\n".join(kept)


_CAPTION_NUMBER = re.compile(r'<span class="caption-number">Fig\. (\d+) </span>')
_NUMREF = re.compile(r'(<span class="std std-numref">)Fig\. (\d+)(</span>)')
_CHAPTER = re.compile(r"^(\d\d)_")


def figure_numbers(pages: dict[str, str]) -> dict[str, str]:
    """The book-wide figure number -> "chapter.k", from each chapter page's captions (a page
    ``NN_slug.html`` is chapter NN; its figures are numbered 1, 2, ... in page order)."""
    labels = {}
    for name, body in pages.items():
        chapter = _CHAPTER.match(name)
        if chapter:
            for k, m in enumerate(_CAPTION_NUMBER.finditer(body), start=1):
                labels[m.group(1)] = f"{int(chapter.group(1))}.{k}"
    return labels


def renumber(body: str, labels: dict[str, str]) -> str:
    body = _CAPTION_NUMBER.sub(lambda m: f'<span class="caption-number">Fig. '
                               f'{labels.get(m.group(1), m.group(1))} </span>', body)
    return _NUMREF.sub(lambda m: f"{m.group(1)}Fig. {labels.get(m.group(2), m.group(2))}"
                       f"{m.group(3)}", body)


def _finish(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    files = sorted(out.rglob("*.html"))
    texts = {page: page.read_text(encoding="utf-8") for page in files}
    labels = figure_numbers({page.name: text for page, text in texts.items()})
    references = "".join(t for p, t in texts.items() if p.name == "references.html")
    letters = year_letters(references)
    entries = reference_entries(references)
    base = (app.config.html_baseurl or "").rstrip("/") + "/"
    for page, text in texts.items():
        head, sep, body = text.partition("</head>")
        if not sep:
            continue
        body = cite_letters(reference_links(alt_texts(body)), letters,
                            page.name == "references.html")
        way = os.path.relpath(out / "book", page.parent)  # "." from a chapter, "book" from /
        body, problems = book_links(body, base, "" if way == "." else way + "/", entries)
        for problem in problems:
            LOGGER.warning(f"{page.relative_to(out)}: {problem}", type="tpviz",
                           subtype="citation")
        new = _scripts_once(head) + sep + renumber(body, labels)
        if new != text:
            page.write_text(new, encoding="utf-8")


LIVE_MIME = "application/vnd.tpviz.live+json"


class LiveRenderer:
    """myst-nb's MIME renderer plugin for an explorer's live figure (see the module's doc)."""

    mime_priority_overrides = ()  # _config.yml puts LIVE_MIME first for the html builder

    @staticmethod
    def handle_mime(renderer, data, inline: bool):
        if data.mime_type != LIVE_MIME:
            return None
        if inline:
            return []
        from docutils import nodes

        from tpviz.core.live import book_html

        return [nodes.raw(text=book_html(data.content), format="html",
                          classes=["output", "text_html"])]


def _register_live_renderer() -> None:
    """Add :class:`LiveRenderer` to the renderers myst-nb loads from its entry points (its
    ``load_mime_renders``: myst-nb 1.x; checked, so that a myst-nb without it fails here)."""
    from myst_nb.core import render

    loaded = getattr(render, "load_mime_renders", None)
    if loaded is None:
        raise RuntimeError("myst-nb has no load_mime_renders: the book's live figures need "
                           "another way in (web/tpviz_book.py).")
    if getattr(loaded, "tpviz", False):
        return

    @functools.cache
    def with_live():
        return [*loaded(), LiveRenderer]

    with_live.tpviz = True
    render.load_mime_renders = with_live


def setup(app):
    _register_live_renderer()
    app.connect("build-finished", _finish)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
