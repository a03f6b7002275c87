"""JupyterLab in headless Chromium, as a learner uses it: a JupyterLab server on a folder, pages
that open a notebook, run it, read what each cell shows, move an explorer's controls and time
the redraw as the page sees it.

The server is the pinned one (requirements.txt) with the settings ``make lab`` gives it
(``--LabApp.app_settings_dir=tools/lab``: widget state saved in the notebook), plus settings of
its own for the test (every cell in the page, no news pop-up). ``window.jupyterapp``
(``expose_app_in_browser``) runs JupyterLab's own commands: open, run all, run a cell, save.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TEST_SETTINGS = {  # the test's own user settings (make lab's come from tools/lab)
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}


class Lab:
    """A JupyterLab server on ``root`` (``with Lab(root) as lab: lab.url``)."""

    def __init__(self, root: Path, home: Path):
        self.root, self.home = root, home
        self.token = secrets.token_hex(16)

    def __enter__(self) -> Lab:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        for name, value in TEST_SETTINGS.items():
            path = self.home / "user-settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        command = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
                   "--ip=127.0.0.1", f"--ServerApp.token={self.token}",
                   f"--ServerApp.root_dir={self.root}", "--LabApp.expose_app_in_browser=True",
                   f"--LabApp.app_settings_dir={ROOT / 'tools' / 'lab'}",
                   f"--LabApp.user_settings_dir={self.home / 'user-settings'}",
                   f"--LabApp.workspaces_dir={self.home / 'workspaces'}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")
        self.log = (self.home / "lab.log").open("w")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        cwd=self.root)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2)
                return self
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.3)
        self.__exit__()
        raise RuntimeError(f"JupyterLab did not start: {(self.home / 'lab.log').read_text()}")

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def page_url(self, path: str) -> str:
        return f"{self.url}/lab/tree/{path}?token={self.token}&reset"


def open_notebook(browser, lab: Lab, path: str, width: int = 1280):
    """A page with ``path`` open, its document loaded; returns (page, console errors)."""
    page = browser.new_page(viewport={"width": width, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.goto(lab.page_url(path))
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                           "window.jupyterapp.shell.currentWidget.content && "
                           "window.jupyterapp.shell.currentWidget.content.widgets", timeout=90_000)
    page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.context.ready; }")
    return page, errors


def kernel_ready(page) -> None:
    page.evaluate("async () => { const w = window.jupyterapp.shell.currentWidget; "
                  "await w.sessionContext.ready; }")


def run_all(page, timeout_s: float = 240) -> None:
    """Run every cell (JupyterLab's Run All) and wait until each code cell has run."""
    kernel_ready(page)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function(
        "(() => { const w = window.jupyterapp.shell.currentWidget; return "
        "w.sessionContext.session.kernel.status === 'idle' && w.content.widgets.every(c => "
        "c.model.type !== 'code' || c.model.executionCount !== null); })()",
        timeout=timeout_s * 1000, polling=250)


def outputs(page) -> list[dict]:
    """Each code cell's index, source and outputs, from the notebook's model."""
    return page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.widgets.map((c, i) => ({index: i, "
        "type: c.model.type, source: c.model.sharedModel.getSource(), outputs: c.model.type "
        "=== 'code' ? c.model.outputs.toJSON() : []})).filter(c => c.type === 'code')")


def errors_in(cells: list[dict]) -> list[str]:
    return [f"cell {c['index']}: {o.get('ename')}: {o.get('evalue', '')[:300]}"
            for c in cells for o in c["outputs"] if o["output_type"] == "error"]


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# Every widget output the model holds, and what the page shows for it: a rendered view, or
# JupyterLab's "Error displaying widget..." / a "Loading widget..." that never ends.
WIDGETS_JS = """
() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const found = [];
  nb.widgets.forEach((cell, index) => {
    if (cell.model.type !== 'code') return;
    const wanted = cell.model.outputs.toJSON().filter(o => o.data &&
        o.data['application/vnd.jupyter.widget-view+json']).length;
    if (!wanted) return;
    const shown = Array.from(cell.node.querySelectorAll('.jp-OutputArea-output'))
      .filter(e => !e.parentElement.closest('.jupyter-widgets') && !e.dataset.mimeType);
    const views = shown.filter(e => e.querySelector(':scope > .jupyter-widgets.widget-box, ' +
        ':scope > .jupyter-widgets[class*="widget-"]'));
    const broken = shown.filter(e => /Error displaying widget|Loading widget/.test(
        e.textContent) && !e.querySelector('.jupyter-widgets'))
      .map(e => e.textContent.trim().slice(0, 80));
    found.push({index, wanted, views: views.length, broken});
  });
  return found;
}
"""


def widget_problems(page) -> list[str]:
    """Widgets the page failed to show (empty: every widget output shows its view)."""
    bad = []
    for w in page.evaluate(WIDGETS_JS):
        if w["broken"] or w["views"] != w["wanted"]:
            bad.append(f"cell {w['index']}: {w['wanted']} widget(s), {w['views']} shown, "
                       f"{w['broken'] or 'no view'}")
    return bad


def explorers(page) -> list[int]:
    """Indices of the cells whose output is an explorer (a box of controls above a figure)."""
    return page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.widgets.map((c, i) => "
        "c.node.querySelector('.jp-OutputArea-output > .widget-vbox .widget-output') ? i : -1)"
        ".filter(i => i >= 0)")


# Move one control of the explorer in cell `cell` (the `nth` drop-down, or check box) and wait
# (at most 30 s) until its figure has changed and is painted: the time from the input event to the frame after
# the new image is decoded, as the page sees it (the kernel's redraw, the messages, the image).
MOVE_JS = """
async ({cell, kind, nth, to}) => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const box = nb.widgets[cell].node.querySelector('.jp-OutputArea-output > .widget-vbox');
  const out = box.querySelector('.widget-output');
  const figure = () => Array.from(out.querySelectorAll('img')).map(i => i.src).join('|') +
      '|' + Array.from(out.querySelectorAll('.tpviz-refused')).map(p => p.textContent).join();
  const before = figure();
  const controls = kind === 'select' ? box.querySelectorAll('.widget-dropdown select') :
      box.querySelectorAll('.widget-checkbox input[type=checkbox]');
  const control = controls[nth];
  if (!control) return {missing: true};
  const label = (control.closest('.widget-inline-hbox') || control.parentElement)
      .innerText.split('\\n')[0].trim();
  const changed = new Promise(resolve => {
    const seen = new MutationObserver(() => {
      if (figure() !== before && (out.querySelector('img') || out.querySelector('.tpviz-refused'))) {
        seen.disconnect(); resolve(true);
      }
    });
    seen.observe(out, {subtree: true, childList: true, attributes: true, characterData: true});
    setTimeout(() => { seen.disconnect(); resolve(false); }, 30000);
  });
  const t0 = performance.now();
  let value;
  if (kind === 'select') {
    const options = Array.from(control.options);
    value = options[to === null ? (control.selectedIndex + 1) % options.length : to].value;
    control.value = value;
    control.dispatchEvent(new Event('change', {bubbles: true}));
    value = control.options[control.selectedIndex].text;
  } else {
    control.click();
    value = control.checked;
  }
  const ok = await changed;
  for (const img of out.querySelectorAll('img')) { try { await img.decode(); } catch (e) {} }
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return {changed: ok, ms: performance.now() - t0, control: label, value: String(value),
          index: kind === 'select' ? control.selectedIndex : null};
}
"""


def move(page, cell: int, kind: str, nth: int, to: int | None = None) -> dict:
    """Move a control: a drop-down to option ``to`` (default: the next), a check box over."""
    return page.evaluate(MOVE_JS, {"cell": cell, "kind": kind, "nth": nth, "to": to})


def controls(page, cell: int) -> dict:
    """The explorer's drop-downs (how many options each) and check boxes (how many)."""
    return page.evaluate(
        "(cell) => { const box = window.jupyterapp.shell.currentWidget.content.widgets[cell]"
        ".node.querySelector('.jp-OutputArea-output > .widget-vbox'); return {select: "
        "Array.from(box.querySelectorAll('.widget-dropdown select')).map(s => s.options.length),"
        " checkbox: box.querySelectorAll('.widget-checkbox input[type=checkbox]').length}; }",
        cell)


def figure_sources(page, cell: int) -> list[str]:
    """The images the explorer in ``cell`` shows (its figure, as data URIs)."""
    return page.evaluate(
        "(cell) => Array.from(window.jupyterapp.shell.currentWidget.content.widgets[cell].node"
        ".querySelectorAll('.jp-OutputArea-output img')).map(i => i.src)", cell)


def run_cell(page, index: int, source: str | None = None) -> list[dict]:
    """(Replace the source of and) run cell ``index``; its outputs once it has run."""
    before = page.evaluate(
        "async ({index, source}) => { const w = window.jupyterapp.shell.currentWidget; "
        "await w.sessionContext.ready; const nb = w.content, cell = nb.widgets[index]; "
        "if (source !== null) cell.model.sharedModel.setSource(source); "
        "const before = cell.model.executionCount; nb.activeCellIndex = index; "
        "nb.deselectAll(); window.jupyterapp.commands.execute('notebook:run-cell'); "
        "return before; }", {"index": index, "source": source})
    page.wait_for_function(
        "([index, before]) => { const w = window.jupyterapp.shell.currentWidget; "
        "const n = w.content.widgets[index].model.executionCount; return n !== null && "
        "n !== before && w.sessionContext.session.kernel.status === 'idle'; }",
        arg=[index, before], timeout=120_000, polling=200)
    return page.evaluate("(index) => window.jupyterapp.shell.currentWidget.content"
                         ".widgets[index].model.outputs.toJSON()", index)


def text_of(outs: list[dict]) -> str:
    parts = []
    for o in outs:
        if o["output_type"] == "stream":
            parts.append("".join(o["text"]))
        elif o["output_type"] == "error":
            parts.append(f"{o['ename']}: {o['evalue']}")
        else:
            parts.append("".join(o.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def save_and_stop(page) -> None:
    """Save the notebook (as JupyterLab writes it: widget state included) and stop its kernel."""
    page.evaluate("async () => { const w = window.jupyterapp.shell.currentWidget; "
                  "await w.context.save(); await w.sessionContext.shutdown(); }")
