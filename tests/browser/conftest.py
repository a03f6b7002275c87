"""The browser test of the built book: headless Debian Chromium driven by Playwright (its Python
package brings the driver; no test downloads a browser). `make test-book` runs it after
`make book`; TPVIZ_CHROMIUM names the browser (default: chromium on the PATH)."""

from __future__ import annotations

import functools
import http.server
import os
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
BUDGET_MS = 50  # a live figure updates within this after a control moves


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


def open_page(browser, url: str):
    """Open ``url``; returns (page, problems): console errors, page errors, failed requests
    (requests to other hosts fail: the book must need none)."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
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


def check_live(page) -> list[dict]:
    """Move every control of every live figure; per control: changed, update times (ms)."""
    return page.evaluate(LIVE_CHECK, 99)
