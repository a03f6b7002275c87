"""Sphinx helper for the book: each page lists a script once.

sphinx-thebe 0.3.1 and sphinx-togglebutton add their inline configuration (``const
THEBE_JS_URL = ...``) each time Jupyter Book reads the sources; a page then declares the
constant twice and the browser reports an error. After the build, drop each repeated
``<script>`` line of a page's head.
"""

from __future__ import annotations

from pathlib import Path


def _once(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        head, sep, body = text.partition("</head>")
        seen, kept = set(), []
        for line in head.split("\n"):
            script = line.strip()
            if script.startswith("<script") and script.endswith("</script>"):
                if script in seen:
                    continue
                seen.add(script)
            kept.append(line)
        if len(kept) != head.count("\n") + 1:
            page.write_text("\n".join(kept) + sep + body, encoding="utf-8")


def setup(app):
    app.connect("build-finished", _once)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
