"""The feedback pages: per student, their points; per submission, the graded notebook.

The notebook page is the submission as it ran in its sandbox, each check cell showing the
checker's verdict and the points it earned (what the learner's own cells printed is shown as
text and images only, and a markdown cell that is not the chapter's own as plain text: no HTML
or scripts of theirs reach the instructor's browser).
"""

from __future__ import annotations

import copy
import html
import json
import urllib.parse

from tpviz.grading.files import MANIFEST, digest

KEPT = ("text/plain", "image/png", "image/jpeg", "image/svg+xml")  # of a cell's rich outputs
SVG = "image/svg+xml"


def _safe(outputs: list) -> list:
    kept = []
    for out in outputs:
        out = copy.deepcopy(out)
        if "data" in out:
            out["data"] = {k: v for k, v in out["data"].items() if k in KEPT and k != SVG}
            if not out["data"]:
                continue
            out["metadata"] = {}
        kept.append(out)
    return kept


def notebook_page(result, trusted: set[str] = frozenset(), exporter=None) -> str:
    """The graded notebook as HTML (nbconvert, with ``exporter`` if given), or a short page when
    it did not run; ``trusted`` are the chapter's own markdown cells (rendered as markdown)."""
    if result.notebook is None:
        return fallback_page(result)
    try:  # the notebook came out of the sandbox: anything in it may be malformed
        return _render(result, trusted, exporter)
    except Exception as e:  # one nbconvert cannot render: say so, keep the points
        return fallback_page(result, f"its page could not be made ({type(e).__name__})")


def _render(result, trusted: set[str], exporter) -> str:
    """The page of a notebook that ran; raises whatever a malformed one makes it raise."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = copy.deepcopy(result.notebook)
    rows = {r[0]: r for r in result.rows}
    for n, cell in enumerate(nb.get("cells", [])):
        cell.setdefault("id", f"cell-{n}")
        if cell["cell_type"] == "code":
            cell["outputs"] = _safe(cell.get("outputs", []))
            continue
        cell.pop("outputs", None)
        text = "".join(cell.get("source", ""))
        if cell["cell_type"] != "markdown" or text not in trusted:  # the learner's: as text
            cell["cell_type"] = "markdown"
            cell["source"] = "\n".join("    " + line for line in text.splitlines()) or "    "
    for gid, index in result.checks.items():
        if gid not in rows or index >= len(nb["cells"]):
            continue
        message = result.messages.get(gid, ["wrong", ""])[1]
        _, got, top, note = rows[gid]
        text = f"{message}\n[{gid}: {got} / {top} points{'; ' + note if note else ''}]\n"
        nb["cells"][index]["outputs"] = [{"output_type": "stream", "name": "stdout",
                                          "text": text}]
    node = nbformat.from_dict(nb)
    exporter = exporter or HTMLExporter(template_name="classic")
    return exporter.from_notebook_node(node)[0]


class Pages:
    """The notebook pages of a run: one nbconvert exporter for all, and the page of a result
    kept from an earlier run read back from ``out`` when it is still what tpviz wrote there (the
    result's cache key holds tpviz's code and the release, so its page is the same)."""

    def __init__(self, out):
        self.out, self.exporter = out, None
        try:
            self.manifest = json.loads((out / MANIFEST).read_text())
        except (OSError, ValueError):
            self.manifest = {}

    def page(self, rel: str, result, trusted: set[str], kept: bool) -> bytes:
        if kept and isinstance(self.manifest, dict) and rel in self.manifest:
            try:
                data = (self.out / rel).read_bytes()
                if self.manifest[rel] == digest(data):
                    return data
            except OSError:
                pass
        if self.exporter is None and result.notebook is not None:
            from nbconvert import HTMLExporter

            self.exporter = HTMLExporter(template_name="classic")
        return notebook_page(result, trusted, self.exporter).encode()


def fallback_page(result, why: str = "") -> str:
    esc = html.escape
    rows = "".join(f"<tr><td>{esc(str(r[0]))}</td><td>{esc(str(r[1]))}</td><td>"
                   f"{esc(str(r[2]))}</td><td>{esc(result.messages.get(r[0], ['', ''])[1])}"
                   "</td></tr>" for r in result.rows)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(result.chapter)}"
            f"</title></head><body><h1>{esc(result.student)}: {esc(result.chapter)}</h1>"
            f"<p>{esc(why or result.problem or 'This submission could not be run.')}</p>"
            f"<table><tr><th>exercise</th><th>points</th><th>max</th><th>why</th></tr>{rows}"
            "</table></body></html>\n")


def summary_page(student: str, rows: list[dict], links: set[str], notes: list[str]) -> str:
    """One HTML page per student: points per exercise and chapter, links to the notebook pages,
    and everything reported about their files (not graded, changed cells, ...)."""
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(student)}: "
             "grades</title></head><body>", f"<h1>Grades of {esc(student)}</h1>"]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    for chapter in sorted({r["chapter"] for r in rows}):
        mine = [r for r in rows if r["chapter"] == chapter]
        got = sum(float(r["points"]) for r in mine)
        top = sum(float(r["max_points"]) for r in mine)
        link = f"{student}/{chapter}.html"
        title = (f"<a href='{esc(urllib.parse.quote(link))}'>{esc(chapter)}</a>" if link in links
                 else esc(chapter))
        parts.append(f"<h2>{title}: {got:g} / {top:g}</h2><table><tr><th>exercise</th>"
                     "<th>points</th><th>max points</th><th>note</th></tr>")
        parts += [f"<tr><td>{esc(r['exercise'])}</td><td>{esc(r['points'])}</td>"
                  f"<td>{esc(r['max_points'])}</td><td>{esc(r['note'])}</td></tr>"
                  for r in mine]
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
