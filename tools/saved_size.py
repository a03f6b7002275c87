"""How many bytes a chapter takes once run and saved, and what takes them (issue 40).

A saved chapter holds its outputs and the widget state that a front end stores in its metadata
(JupyterLab with ``saveState``, which `make lab` and Binder turn on; nbclient, which the pinned
`make test` runs chapters with, stores the same). JupyterLab writes notebooks as nbformat does:
JSON indented by 1, non-ASCII characters kept. A learner should be able to keep and mail a run
chapter, so `make test` fails a chapter that saves to more than :data:`LIMIT` bytes.

Usage: ``python tools/saved_size.py [CACHE]`` prints each chapter's size from the book's
execution cache (default ``_build/.jupyter_cache``) and its largest outputs.
"""

from __future__ import annotations

import json
import sys

import nbformat

#: the issue's bar is 1 MB a chapter; 0.1 MB of it is left for what a learner adds (their own
#: cells' outputs, an explorer whose last figure has more ink than its first)
LIMIT = 900_000
WIDGETS = "application/vnd.jupyter.widget-state+json"


def saved_bytes(nb: nbformat.NotebookNode) -> int:
    """The size of ``nb`` written as JupyterLab saves it (``nbformat.write``: with a final
    newline)."""
    return len(nbformat.writes(nb).encode()) + 1


def largest(nb: nbformat.NotebookNode, n: int = 5) -> list[tuple[int, str]]:
    """The ``n`` largest parts of ``nb``: each output's MIME data or stream text, and each
    widget model's stored state, as (bytes of JSON, where)."""
    parts = []
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            for mime, data in output.get("data", {}).items():
                parts.append((len(json.dumps(data)), f"cell {i}: {mime}"))
            if "text" in output:
                parts.append((len(json.dumps(output["text"])), f"cell {i}: {output['name']}"))
    state = nb.metadata.get("widgets", {}).get(WIDGETS, {}).get("state", {})
    for key, model in state.items():
        parts.append((len(json.dumps(model)), f"widget state: {model.get('model_name')} {key}"))
    return sorted(parts, reverse=True)[:n]


def too_large(nb: nbformat.NotebookNode, name: str, limit: int = LIMIT) -> str | None:
    """``None`` when ``nb`` saves to at most ``limit`` bytes; else a message naming the size and
    the largest parts."""
    size = saved_bytes(nb)
    if size <= limit:
        return None
    parts = "\n".join(f"  {b:>9,} B  {where}" for b, where in largest(nb))
    return (f"{name} saves to {size:,} bytes after a full run (at most {limit:,}: issue 40). "
            f"Its largest parts:\n{parts}")


def main(cache: str = "_build/.jupyter_cache") -> None:
    from jupyter_cache import get_cache

    store = get_cache(cache)
    rows = []
    for record in store.list_cache_records():
        nb = store.get_cache_bundle(record.pk).nb
        rows.append((record.uri.rsplit("/", 1)[-1], nb))
    for name, nb in sorted(rows, key=lambda row: row[0]):
        print(f"{name:40} {saved_bytes(nb):>10,}")
        for b, where in largest(nb, 3):
            print(f"{'':40} {b:>10,}  {where}")


if __name__ == "__main__":
    main(*sys.argv[1:])
