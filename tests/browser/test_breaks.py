"""The browser checks fail when a figure breaks: a page with live figures broken on purpose (a
control the rows ignore, a chart that cannot draw) is caught by the same checks test_book.py
runs on the book."""

from __future__ import annotations

import shutil

import pytest

from conftest import HTML, check_live, open_page, serve
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


def _page(tmp_path, figures) -> str:
    if not (HTML / "_static" / "vega").exists():
        pytest.fail("No built book (its vendored Vega scripts): run `make book` first.")
    shutil.copytree(HTML / "_static", tmp_path / "_static")
    body = "".join(embed(f, name) for name, f in figures.items())
    scripts = "".join(f'<script src="_static/{s}"></script>' for s in (
        "vega/vega.min.js", "vega/vega-lite.min.js", "vega/vega-embed.min.js",
        "tpviz-live.js"))
    (tmp_path / "index.html").write_text(f'<!doctype html><html><head><meta charset="utf-8">'
                                         f"{scripts}</head><body>{body}</body></html>")
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
