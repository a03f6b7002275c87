"""A JAX compilation cache per chapter, filled by the grading itself before any submission runs.

Every submission of a chapter runs the chapter's own cells, which compile the same programs in
every sandbox; without a shared cache each submission compiles them again (about half of its
notebook's CPU time for chapter 5). Before the first submission of a chapter is graded, its
release (the student version, unchanged: no solution is run) runs once through the same runner,
in a sandbox that may write to a new, empty cache folder. Every submission of that chapter then
sees that folder read-only: JAX finds there the programs the chapter's cells compile and compiles
the rest itself, told never to write (see :mod:`tpviz.grading.isolate`; JAX 0.7.2, 0.10.2 and
0.12 read a read-only cache without a warning).

A submission cannot write to the cache, so it cannot change what another compiles: the entries
come only from the release's cells, written before any submission ran, and JAX keys each by the
program, the compile options and its own version. The folder is kept for later runs in
``<out>/.tpviz-cache/.jax/``, which only the grading process writes (no student's folder starts
with a dot), under a key of its own: the release, tpviz's code, the versions of Python, JAX and
jaxlib, and this machine's CPU features (a program compiled for one CPU may not run on another).
A warm-up that fails or is stopped leaves nothing (a half-written entry could be read): that
chapter is graded without a cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from tpviz.grading.jobs import Context, run_notebook
from tpviz.grading.prepare import prepare

DONE = ".complete"  # written last into a filled cache folder


def _machine() -> str:
    """The CPU's features, as Linux lists them (compiled programs use them)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln for ln in f if ln.startswith(("flags", "Features"))), "")
    except OSError:
        return ""


def _versions() -> str:
    found = []
    for name in ("jax", "jaxlib"):
        try:
            found.append(f"{name}={version(name)}")
        except PackageNotFoundError:
            found.append(f"{name}=none")
    return f"{sys.version}|{'|'.join(found)}|{_machine()}"


class CompileCaches:
    """The chapters' compile caches of a run, kept in ``folder`` between runs."""

    def __init__(self, folder: Path, settings: str):
        self.folder, self.settings = folder, settings + _versions()

    def key(self, release: dict) -> str:
        h = hashlib.sha256(self.settings.encode())
        h.update(json.dumps(release, sort_keys=True).encode())
        return h.hexdigest()[:32]

    def warm(self, ctx: Context, chapter: str) -> str:
        """Hand ``chapter``'s cache to ``ctx`` (``ctx.caches``), filling it from its release if
        no earlier run left one under the same key; returns a line saying how it went."""
        release = ctx.releases[chapter]
        final = self.folder / f"{chapter}-{self.key(release)}"
        if (final / DONE).exists():
            ctx.caches[chapter] = final
            return f"{chapter}: compiled programs kept from an earlier run"
        self.folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        filling = Path(tempfile.mkdtemp(prefix=f".{chapter}-", dir=self.folder))
        try:
            prepared = prepare(json.dumps(release).encode(), release)
            _, _, notebook, why = run_notebook(ctx, prepared, filling, fill=True)
            if notebook is None or why:
                why = why or "the release's run sent no notebook"
                return (f"warning: {chapter}: the compile cache could not be filled ({why}); "
                        "its submissions are graded without one (slower)")
            programs = sum(1 for _ in filling.iterdir())
            (filling / DONE).write_text("")
            for old in self.folder.glob(f"{chapter}-*"):  # another release or version
                shutil.rmtree(old, ignore_errors=True)
            os.replace(filling, final)
        finally:
            shutil.rmtree(filling, ignore_errors=True)  # gone unless it became `final`
        ctx.caches[chapter] = final
        return (f"{chapter}: {programs} compiled programs cached from the release in "
                f"{time.perf_counter() - start:.0f} s")
