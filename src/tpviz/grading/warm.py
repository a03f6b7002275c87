"""A JAX compilation cache per chapter, filled by the grading itself before any submission runs.

Every submission of a chapter runs the chapter's own cells, which compile the same programs in
every sandbox; without a shared cache each submission compiles them again (about a quarter of
its CPU time for chapter 5). Before the first submission of a chapter is graded, its release
(the student version, unchanged: no solution is run) runs once through the same runner, in a
sandbox that may write to a new, empty cache folder (:class:`CompileCaches`). Every submission
of that chapter then sees that folder read-only: JAX finds there the programs the chapter's
cells compile and compiles the rest itself, told never to write (see
:mod:`tpviz.grading.isolate`; JAX 0.7.2, 0.10.2 and 0.12 read a read-only cache without a
warning). A submission cannot write to the cache, so it cannot change what another compiles;
the entries come only from the release's cells, run before any submission; JAX keys each by the
program, the compile options and the JAX version. A warm-up that fails or is stopped leaves no
cache (a half-written entry could be read): that chapter is graded without one.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import time
from pathlib import Path

from tpviz.grading.jobs import Context, run_notebook
from tpviz.grading.prepare import prepare


class CompileCaches:
    """A temporary folder (only its owner can read it) holding one cache folder per chapter,
    removed on every way out (``with CompileCaches() as caches``)."""

    def __enter__(self) -> CompileCaches:
        self.root = Path(tempfile.mkdtemp(prefix="tpviz-jax-cache-"))
        atexit.register(shutil.rmtree, self.root, ignore_errors=True)
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def warm(self, ctx: Context, chapter: str) -> str:
        """Fill ``chapter``'s cache from its release and hand it to ``ctx`` (``ctx.caches``);
        returns a line saying how it went."""
        folder = self.root / chapter
        folder.mkdir()
        start = time.perf_counter()
        release = ctx.releases[chapter]
        prepared = prepare(json.dumps(release).encode(), release)
        _, _, notebook, why = run_notebook(ctx, prepared, folder, fill=True)
        if notebook is None or why:
            shutil.rmtree(folder, ignore_errors=True)
            why = why or "the release's run sent no notebook"
            return (f"warning: {chapter}: the compile cache could not be filled ({why}); its "
                    "submissions are graded without one (slower)")
        ctx.caches[chapter] = folder
        programs = sum(1 for _ in folder.iterdir())
        return (f"{chapter}: {programs} compiled programs cached from the release in "
                f"{time.perf_counter() - start:.0f} s")
