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
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle


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


_LIST_LABEL = re.compile(r'<div class="citation" id="(id\d+)"[^>]*>\s*<span class="label">'
                         r'<span class="fn-bracket">\[</span>[^<]*?, \d{4}([a-z])<')
_CITATION = re.compile(r'(<a class="reference internal" href="(references\.html)?#(id\d+)"'
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
    files = sorted(Path(app.outdir).rglob("*.html"))
    texts = {page: page.read_text(encoding="utf-8") for page in files}
    labels = figure_numbers({page.name: text for page, text in texts.items()})
    letters = year_letters("".join(t for p, t in texts.items() if p.name == "references.html"))
    for page, text in texts.items():
        head, sep, body = text.partition("</head>")
        if not sep:
            continue
        body = cite_letters(reference_links(alt_texts(body)), letters,
                            page.name == "references.html")
        new = _scripts_once(head) + sep + renumber(body, labels)
        if new != text:
            page.write_text(new, encoding="utf-8")


def setup(app):
    app.connect("build-finished", _finish)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
