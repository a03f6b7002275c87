"""The browser test of the built book: headless Debian Chromium driven by Playwright (its Python
package brings the driver; no test downloads a browser). `make test-book` runs it after
`make book`; TPVIZ_CHROMIUM names the browser (default: chromium on the PATH)."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]
LIVE_CHECK = (Path(__file__).parent / "live_check.js").read_text()
PAGE_CHECK = (Path(__file__).parent / "page_check.js").read_text()
BUDGET_MS = 50  # a live figure updates within this after a control moves (input to next frame)
# a static figure this wide or narrower must be shown at >= 0.8 of its width at 1280 px (wider
# ones: dense charts a reader enlarges with a click, tpviz-figures.js)
MAX_FIGURE_PX = 1000
# an alt text that is a file name or path, not words ("1/4 of both" is words)
FILE_NAME = r"\S*[/\\]\S*|\S+\.(png|gif|svg|jpe?g)"


def chromium_path() -> str:
    path = os.environ.get("TPVIZ_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if not path:
        pytest.fail("No Chromium: `apt-get install chromium` (make test-book does it).")
    return path


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=FLAGS)  # no download
        yield b
        b.close()


def serve(folder: Path):
    """A local HTTP server of ``folder`` (in a thread); returns (base URL, server)."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def book_url():
    if not (HTML / "index.html").exists():
        pytest.fail("No built book: run `make book` first.")
    url, server = serve(HTML)
    yield url
    server.shutdown()


def open_page(browser, url: str, width: int = 1280):
    """Open ``url`` in a window ``width`` px wide; returns (page, problems): console errors,
    page errors, failed requests (requests to other hosts fail: the book must need none)."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}")
            if r.status >= 400 else None)
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(
        url.split("/", 3)[0] + "//" + url.split("/", 3)[2]) or route.request.url.startswith(
        "data:") else route.abort())
    page.goto(url, wait_until="load")
    return page, problems


def measure_page(page) -> dict:
    """What the reader sees (page_check.js): live chart widths, cut text, contrast, static
    figures' scale and alt text, code cells that scroll sideways."""
    return page.evaluate(PAGE_CHECK)


def page_problems(seen: dict, phone: bool = False) -> list[str]:
    """The reader-facing problems in :func:`measure_page`'s result (empty: none). On a phone
    (``phone``) figures may be scaled down and code may scroll; nothing may overflow."""
    bad = []
    for f in seen["live"]:
        if f["chart"] > f["container"] + 1:
            bad.append(f"{f['name']}: chart {f['chart']:.0f} px in a {f['container']:.0f} px box")
        if f["truncated"]:
            bad.append(f"{f['name']}: text cut with '…': {f['truncated'][:2]}")
        if f["lowContrast"]:
            bad.append(f"{f['name']}: text under 4.5:1 contrast: {f['lowContrast']}")
        if f["paleMarks"]:
            bad.append(f"{f['name']}: marks under 3:1 against the background: {f['paleMarks']}")
        if not f["label"].strip():
            bad.append(f"{f['name']}: the chart has no aria-label")
    for i in seen["images"]:
        if not i["alt"].strip() or re.fullmatch(FILE_NAME, i["alt"].strip()):
            bad.append(f"image {i['src']}: alt text {i['alt']!r} is not a description")
        if not phone and i["shown"] < 0.8 * min(i["natural"], MAX_FIGURE_PX):
            bad.append(f"image {i['src']}: shown at {i['shown'] / i['natural']:.2f} of its "
                       f"{i['natural']} px")
    code = seen["code"]
    if not phone and code["total"] and code["scrolling"] > 0.1 * code["total"]:
        bad.append(f"{code['scrolling']} of {code['total']} code cells scroll sideways")
    if seen["wideOutputs"]:
        bad.append(f"{seen['wideOutputs']} outputs wider than the column")
    return bad


def check_live(page, first_only: bool = False) -> list[dict]:
    """Move every control of every live figure; per control: changed, update times (ms). Each
    figure's first move on the page comes first, marked ``first`` (``first_only``: only it)."""
    return page.evaluate(LIVE_CHECK, {"tries": 99, "firstOnly": first_only})


def p90(values: list[float]) -> float:
    """The 90th percentile (the value 90 % of the sorted values are at or under)."""
    return sorted(values)[int(0.9 * (len(values) - 1))]


def timing_problems(times: dict[str, list[float]], first: dict[str, list[float]]) -> list[str]:
    """Live figures over the budget: the p90 of their moves, or of their first moves on fresh
    pages (each from input to the frame after the redraw; empty: none)."""
    bad = []
    for name, t in sorted(times.items()):
        if t and p90(t) > BUDGET_MS:
            bad.append(f"{name}: moves take {p90(t):.1f} ms at p90 (budget {BUDGET_MS} ms)")
    for name, t in sorted(first.items()):
        if t and p90(t) > BUDGET_MS:
            bad.append(f"{name}: first move on a fresh page takes {p90(t):.1f} ms at p90 of "
                       f"{len(t)} loads ({', '.join(f'{x:.0f}' for x in t)} ms; budget "
                       f"{BUDGET_MS} ms)")
    return bad
