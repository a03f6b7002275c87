"""The browser checks fail when what they check breaks. A page with live figures broken on
purpose (a control the rows ignore, a chart that cannot draw) is caught by the same checks
test_book.py runs on the book; and a small page built like a book page (a live figure, a static
figure, code cells), which passes every check of page_check.js, is broken once per check (a
chart wider than its box, text cut with "…", low-contrast text, pale marks, no accessible
label, a figure shown small, an alt text that is a file name, code scrolling sideways, an
output wider than the column, a first move over the budget): each break must be reported."""

from __future__ import annotations

import altair as alt
import pytest

from conftest import (
    HTML,
    check_live,
    measure_page,
    open_page,
    page_problems,
    serve,
    timing_problems,
)
from tpviz.core.figures import figure, png
from tpviz.core.live import Grid, LiveFigure, bar_rows, embed, words_and_bars

GOOD = LiveFigure(controls={"n": Grid([1, 2, 4], "n"), "m": Grid([1, 2], "m")},
                  rows=lambda n, m: bar_rows([("n × m", n * m, f"{n * m}")]),
                  chart=lambda base: words_and_bars(base, "value"))
DEAD = LiveFigure(controls={"n": Grid([1, 2, 4], "n"), "m": Grid([1, 2], "m")},
                  rows=lambda n, m: bar_rows([("n", n, f"{n}")]),  # m is ignored: dead
                  chart=lambda base: words_and_bars(base, "value"))


def _broken_chart(base):
    return base.mark_bar().encode(x="value:Q", y="what:N").transform_calculate(
        bad="nosuchfunction(datum.value)")  # Vega cannot parse it: the figure breaks


BROKEN = LiveFigure(controls={"n": Grid([1, 2], "n")},
                    rows=lambda n: bar_rows([("n", n, f"{n}")]), chart=_broken_chart)


def _cut_chart(base):  # axis labels limited to 40 px: Vega cuts the long name with "…"
    return base.transform_filter("isValid(datum.what)").mark_bar().encode(
        x="value:Q", y=alt.Y("what:N", axis=alt.Axis(labelLimit=40)))


CUT = LiveFigure(controls={"n": Grid([1, 2], "n")}, chart=_cut_chart,
                 rows=lambda n: bar_rows([("the all-gather of the weights", n, f"{n}")]))

SCRIPTS = ("vega/vega.min.js", "vega/vega-lite.min.js", "vega/vega-embed.min.js",
           "tpviz-live.js")


def _page(tmp_path, figures, article: str = ""):
    """A page of ``figures`` (name -> LiveFigure) and ``article`` HTML, with the book's own
    scripts and style; returns (base URL, server)."""
    if not (HTML / "_static" / "vega").exists():
        pytest.fail("No built book (its vendored Vega scripts): run `make book` first.")
    (tmp_path / "_static").symlink_to(HTML / "_static", target_is_directory=True)
    body = "".join(embed(f, name) for name, f in figures.items())
    scripts = "".join(f'<script src="_static/{s}"></script>' for s in SCRIPTS)
    (tmp_path / "index.html").write_text(
        f'<!doctype html><html><head><meta charset="utf-8">{scripts}'
        '<link rel="stylesheet" href="_static/tpviz-live.css">'
        "<style>body { margin: 0 } article { width: 656px; margin: 0 auto; }</style>"
        f"</head><body><article>{body}{article}</article></body></html>")
    return serve(tmp_path)


def _moves(results: list[dict]) -> list[dict]:
    """The per-control results (without the figure's first move, reported apart)."""
    return [r for r in results if not r.get("first")]


def test_good_figure_passes(browser, tmp_path):
    url, server = _page(tmp_path, {"good": GOOD})
    page, problems = open_page(browser, url + "/index.html")
    results = _moves(check_live(page))
    server.shutdown()
    assert [r["changed"] for r in results] == [True, True] and not problems


def test_dead_control_is_caught(browser, tmp_path):
    url, server = _page(tmp_path, {"dead": DEAD})
    page, _ = open_page(browser, url + "/index.html")
    results = _moves(check_live(page))
    server.shutdown()
    assert {r["control"].split()[0]: r["changed"] for r in results} == {"n": True, "m": False}


def test_broken_figure_is_caught(browser, tmp_path):
    url, server = _page(tmp_path, {"broken": BROKEN})
    page, problems = open_page(browser, url + "/index.html")
    with pytest.raises(Exception, match="nosuchfunction"):
        check_live(page)  # the figure never drew: the check itself fails
    server.shutdown()
    assert any("nosuchfunction" in p for p in problems), problems


# --- a page like the book's, and one break per check of page_check.js ---------------------

ALT = "Bars of n times m for every setting"
CODE = '<div class="cell_input"><pre>{}</pre></div>'


def _book_page(tmp_path, figures=None):
    """A page built like a book page: a live figure, a static figure 680 px wide with words
    for its alt text, and ten short code cells."""
    fig = figure(1.5)
    fig.add_subplot().bar(["a", "b"], [1, 2])
    (tmp_path / "figure.png").write_bytes(png(fig))
    article = (f'<div class="cell_output"><img src="figure.png" alt="{ALT}"></div>' +
               "".join(CODE.format(f"x{i} = {i}") for i in range(10)))
    return _page(tmp_path, figures or {"good": GOOD}, article)


def _seen(browser, tmp_path, figures=None, css: str = "", js: str = "",
          width: int = 1280) -> list[str]:
    """page_problems of the book-like page at ``width`` px, after ``css`` and ``js`` break it."""
    url, server = _book_page(tmp_path, figures)
    page, problems = open_page(browser, url + "/index.html", width=width)
    try:
        page.evaluate("window.tpvizLiveReady")
        page.evaluate("Promise.all(Array.from(document.images).map((i) => i.decode()))")
        if css:
            page.add_style_tag(content=css)
        if js:
            page.evaluate(js)
        assert not problems, problems
        return page_problems(measure_page(page), phone=width < 500)
    finally:
        page.close()
        server.shutdown()


@pytest.mark.parametrize("width", [1280, 390])
def test_book_like_page_passes(browser, tmp_path, width):
    assert _seen(browser, tmp_path, width=width) == []


LONG = "y = " + " + ".join(f"x{i}" for i in range(40))  # about 250 characters: scrolls
BREAKS = {  # what breaks the page -> what the check must say
    "chart wider than its box": (
        {"js": "document.querySelector('div.tpviz-live').style.width = '300px'"}, "px box"),
    "text cut with '…'": ({"figures": {"cut": CUT}}, "cut with '…'"),
    "low-contrast text": (
        {"css": "div.tpviz-live svg text { fill: #b0b0b0 !important; }"}, "under 4.5:1"),
    "pale marks": ({"css": "div.tpviz-live g.mark-rect path { fill: #F0E442 !important; "
                           "stroke: none !important; }"}, "marks under 3:1"),
    "no accessible label": (
        {"js": "document.querySelector('div.tpviz-live svg').removeAttribute('aria-label')"},
        "no aria-label"),
    "figure shown small": ({"css": "div.cell_output img { width: 400px !important; }"},
                           "shown at 0.59 of its 680 px"),
    "alt text a file name": (
        {"js": "document.images[0].alt = '_images/3f9a0c1e.png'"}, "is not a description"),
    "code scrolling sideways": (
        {"js": "for (let i = 0; i < 3; i++) document.querySelector('article')"
               f".insertAdjacentHTML('beforeend', {CODE.format(LONG)!r})"},
         "3 of 13 code cells scroll sideways"),
    "output wider than the column": (
        {"js": "document.querySelector('article').insertAdjacentHTML('beforeend', "
               "'<div class=\"cell_output\"><div style=\"width: 900px\">wide</div></div>')"},
        "1 outputs wider than the column"),
}


@pytest.mark.parametrize("broken", BREAKS)
def test_each_page_check_fails_when_broken(browser, tmp_path, broken):
    how, said = BREAKS[broken]
    bad = _seen(browser, tmp_path, **how)
    assert any(said in b for b in bad), f"{broken}: not reported ({bad})"


def test_slow_first_move_is_caught(browser, tmp_path):
    """A figure whose first move takes 80 ms (a listener that blocks once) breaks the
    first-move budget (its later moves are not slowed; their times depend on the machine)."""
    url, server = _page(tmp_path, {"good": GOOD})
    page, _ = open_page(browser, url + "/index.html")
    try:
        page.evaluate("window.tpvizLiveReady.then(() => { let once = true; "
                      "window.tpvizLive[0].view.addSignalListener('_id', () => { "
                      "const t = performance.now(); while (once && performance.now() - t < 80); "
                      "once = false; }); })")
        results = check_live(page)
    finally:
        page.close()
        server.shutdown()
    first = {"good": [ms for r in results if r.get("first") for ms in r["ms"]]}
    times = {"good": [ms for r in _moves(results) for ms in r["ms"]]}
    assert first["good"][0] >= 80, results
    bad = timing_problems(times, first)
    assert any("good: first move on a fresh page" in b for b in bad), bad
