"""Writing outputs without ever losing work.

Every folder tpviz writes into (student copies, grades) keeps a manifest, ``.tpviz-written.json``,
of the files it wrote and their SHA-256. A file is overwritten only if it is still exactly what
tpviz wrote; a file changed since (a learner's answers, an instructor's notes) or not written by
tpviz is never replaced unless ``force`` is given. Nothing is written into a source folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tpviz.errors import GradingError

MANIFEST = ".tpviz-written.json"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def refuse_inside(out: Path, *sources: Path) -> None:
    """Raise :class:`GradingError` if ``out`` is one of ``sources`` or inside one of them."""
    out = out.resolve()
    for src in sources:
        src = src.resolve()
        if out == src or src in out.parents:
            raise GradingError(f"refusing to write into {src}, which holds the sources; "
                               "choose an output folder outside it (e.g. student/ or grades/)")


def changed_files(out: Path, names) -> list[str]:
    """The names among ``names`` whose file in ``out`` exists and differs from what tpviz last
    wrote there (a learner's or an instructor's change, or a file tpviz did not write)."""
    manifest_path = out / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    return [rel for rel in names if (out / rel).exists()
            and manifest.get(rel) != digest((out / rel).read_bytes())]


def check_writable(out: Path, names, *, force: bool = False) -> None:
    """Raise :class:`GradingError` if a file ``out/<name>`` exists and differs from what tpviz
    last wrote there (a learner's or an instructor's change), unless ``force``."""
    if force:
        return
    changed = [str(out / rel) for rel in changed_files(out, names)]
    if changed:
        raise GradingError(
            "refusing to overwrite files changed since tpviz wrote them (or not written by "
            "tpviz): " + ", ".join(changed) + ". Move them away, or pass --force to replace them.")


def write_all(out: Path, files: dict[str, bytes], *, force: bool = False) -> list[Path]:
    """Write ``files`` (relative path -> content) under ``out``; all or nothing.

    Raises :class:`GradingError`, writing nothing, if any existing file differs from what tpviz
    last wrote there (unless ``force``). Returns the paths written (unchanged files are skipped).
    """
    check_writable(out, files, force=force)
    manifest_path = out / MANIFEST
    manifest: dict[str, str] = (json.loads(manifest_path.read_text())
                                if manifest_path.exists() else {})
    written = []
    for rel, data in files.items():
        path = out / rel
        if path.exists() and path.read_bytes() == data:
            manifest[rel] = digest(data)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        manifest[rel] = digest(data)
        written.append(path)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return written
