"""Sphinx helper for the book: each page lists a script once.

sphinx-thebe 0.3.1 adds its inline configuration (``const THEBE_JS_URL = ...``) each time the
environment is read; when Jupyter Book reads twice, the page declares the constant twice and
the browser reports an error. Drop repeated scripts from each page.
"""

from __future__ import annotations


def _once(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {}) or {}
        key = (str(getattr(script, "filename", script)), str(attributes.get("body")))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    if "script_files" in context:
        context["script_files"][:] = kept


def setup(app):
    app.connect("html-page-context", _once, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
