"""Every page of the built book in headless Chromium: it loads with no console errors and no failed
requests, every image has loaded, no raw TeX is left (worked answers opened), every live figure
changes when each control moves, no control is dead, the launch buttons point at Colab and
Binder with the page's own notebook, and a screenshot is saved per page. Update times are
measured from input to the next painted frame and held to 50 ms at p90: every move, and each
figure's first move over fresh page loads. What the reader sees is measured at 1280 and 390 px
(page_check.js): live charts within their box, no text cut with "…", text contrast >= 4.5:1 and
marks >= 3:1, static figures at >= 0.8 of their width, alt texts that describe, at most 10 % of
code cells scrolling sideways, no output wider than the column. test_breaks.py breaks each check
on purpose."""

from __future__ import annotations

import json
import re
import statistics

import pytest
import yaml

from conftest import (
    HTML,
    ROOT,
    SHOTS,
    check_live,
    measure_page,
    open_page,
    p90,
    page_problems,
    timing_problems,
)

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO = CONFIG["repository"]["url"].removeprefix("https://github.com/")
BRANCH = CONFIG["repository"]["branch"]
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
PAGES = [TOC["root"]] + [c["file"] for c in TOC["chapters"]]
TIMES: dict[str, list[float]] = {}
FIRST: dict[str, list[float]] = {}  # each figure's first move on a fresh page
SEEN: dict[str, dict] = {}  # what each page showed at 1280 px (for _build/screenshots/pages.json)
SEEN_PHONE: dict[str, dict] = {}  # and at a phone's width
PHONE = 390  # px: a phone's width
FRESH_LOADS = 2  # more fresh loads of each page with live figures, to time their first moves


@pytest.mark.parametrize("page_name", PAGES)
def test_page(browser, book_url, page_name):
    page, problems = open_page(browser, f"{book_url}/{page_name}.html")
    try:
        page.wait_for_function("window.tpvizLiveReady !== undefined", timeout=10_000)
        page.evaluate("window.tpvizLiveReady")
        page.wait_for_function("!window.MathJax || !window.MathJax.startup || "
                               "window.MathJax.startup.promise", timeout=10_000)
        page.evaluate("window.MathJax && window.MathJax.startup && "
                      "window.MathJax.startup.promise.then(() => 1)")
        broken = page.evaluate("Array.from(document.images).filter(i => !i.complete || "
                               "i.naturalWidth === 0).map(i => i.src.slice(0, 80))")
        assert not broken, f"{page_name}: images that did not load: {broken}"
        # the worked answers are folded (<details>): open each, so their math is read too
        answers = page.evaluate(
            "(() => { const ds = Array.from(document.querySelectorAll('details')).filter(d => "
            "/^\\s*Answer/.test((d.querySelector('summary') || {}).innerText || ''));"
            " ds.forEach(d => { d.open = true; }); return ds.length; })()")
        source = (ROOT / f"{page_name}.ipynb")
        if source.exists():
            folded = source.read_text().count("<summary>Answer</summary>")
            assert answers == folded, f"{page_name}: {answers} answers shown of {folded}"
        text = page.evaluate("document.querySelector('main, article, body').innerText")
        tex = re.findall(r"\\\(|\\\[|\$\$|\\frac|\\begin\{", text)
        assert not tex, f"{page_name}: raw TeX left in the page: {tex[:5]}"
        if source.exists():
            links = page.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.href)")
            colab = (f"https://colab.research.google.com/github/{REPO}/blob/{BRANCH}/"
                     f"{page_name}.ipynb")
            binder = f"https://mybinder.org/v2/gh/{REPO}/{BRANCH}?urlpath="
            assert colab in links, f"{page_name}: no Colab launch button to {colab}"
            assert any(h.startswith(binder) and h.endswith(f"{page_name}.ipynb")
                       for h in links), f"{page_name}: no Binder launch button to its notebook"
        seen = measure_page(page)
        SEEN[page_name] = seen
        bad = page_problems(seen)
        assert not bad, f"{page_name} at 1280 px: {bad}"
        results = check_live(page)
        dead = [f"{r['figure']}: {r['control']}" for r in results if not r["changed"]]
        assert not dead, f"{page_name}: controls that change nothing: {dead}"
        assert all(r["restored"] for r in results), f"{page_name}: a figure did not come back"
        for r in results:
            (FIRST if r.get("first") else TIMES).setdefault(r["figure"], []).extend(r["ms"])
        # controls outside a live figure would be dead in a page with no kernel
        stray = page.evaluate("Array.from(document.querySelectorAll('article input, "
                              "article select')).filter(e => !e.closest('.tpviz-live') && "
                              "e.type !== 'checkbox' && e.type !== 'hidden').length")
        assert stray == 0, f"{page_name}: {stray} controls outside live figures (dead)"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{page_name.replace('/', '_')}.png"), full_page=True)
        assert not problems, f"{page_name}: {problems}"
    finally:
        page.close()


@pytest.mark.parametrize("page_name", PAGES)
def test_page_on_a_phone(browser, book_url, page_name):
    """At a phone's width nothing overflows: live charts fit their box (scaled if they must),
    their words wrap instead of being cut, no output is wider than the column."""
    page, problems = open_page(browser, f"{book_url}/{page_name}.html", width=PHONE)
    try:
        page.evaluate("window.tpvizLiveReady")
        SEEN_PHONE[page_name] = seen = measure_page(page)
        bad = page_problems(seen, phone=True)
        assert not bad, f"{page_name} at {PHONE} px: {bad}"
        if page_name.endswith(("07_pipeline", "11_together")):
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"{page_name.replace('/', '_')}_{PHONE}px.png"),
                            full_page=True)
        assert not problems, f"{page_name}: {problems}"
    finally:
        page.close()


@pytest.mark.parametrize("page_name", PAGES)
def test_first_moves(browser, book_url, page_name):
    """Each live figure's first move on a fresh page, timed over more fresh loads (Vega's first
    pass, the browser's first redraw: what a reader trying the figure first waits)."""
    if 'class="tpviz-live"' not in (HTML / f"{page_name}.html").read_text():
        pytest.skip("no live figure on this page")
    for _ in range(FRESH_LOADS):
        page, problems = open_page(browser, f"{book_url}/{page_name}.html")
        try:
            for r in check_live(page, first_only=True):
                FIRST.setdefault(r["figure"], []).extend(r["ms"])
            assert not problems, f"{page_name}: {problems}"
        finally:
            page.close()


def test_update_times():
    """Every live figure updates within the budget: the 90th percentile of the control moves
    measured above, and of each figure's first move over fresh page loads; writes
    _build/screenshots/live_times.json for the benchmarks."""
    assert TIMES, "no live figure was measured (did the page tests run?)"
    report = {name: {"median_ms": round(statistics.median(t), 1),
                     "p90_ms": round(p90(t), 1), "max_ms": round(max(t), 1), "moves": len(t),
                     "first_move_median_ms": round(statistics.median(FIRST.get(name, [0])), 1),
                     "first_move_p90_ms": round(p90(FIRST.get(name, [0])), 1),
                     "first_moves": len(FIRST.get(name, []))}
              for name, t in TIMES.items()}
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "live_times.json").write_text(json.dumps(report, indent=1))
    widths = {f"{name} at {px} px": [{"figure": f["name"], "chart_px": round(f["chart"]),
                                      "box_px": round(f["container"])} for f in seen["live"]]
              for px, pages in ((1280, SEEN), (PHONE, SEEN_PHONE))
              for name, seen in pages.items() if seen["live"]}
    (SHOTS / "live_widths.json").write_text(json.dumps(widths, indent=1))
    slow = timing_problems(TIMES, FIRST)
    assert not slow, f"live figures over the budget: {slow}"


def test_every_explorer_is_live_in_the_book():
    """Every topic with a LIVE spec has its live figure in some page."""
    import importlib
    import pkgutil

    import tpviz

    wanted = set()
    for m in pkgutil.iter_modules(tpviz.__path__):
        try:
            explore = importlib.import_module(f"tpviz.{m.name}.explore")
        except ModuleNotFoundError:
            continue
        if hasattr(explore, "LIVE"):  # the explorer's render function names its figure
            wanted.update(n for n in vars(explore) if n.startswith("render_"))
    pages = " ".join(p.read_text() for p in HTML.glob("book/*.html"))
    found = set(re.findall(r'class="tpviz-live" data-name="([^"]+)"', pages))
    assert wanted <= found, f"live figures missing from the book: {sorted(wanted - found)}"
