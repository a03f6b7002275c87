"""Helpers for *build* checkers: run the learner's code on a mesh once, under the time limit,
and read the collectives of the very program that ran.

``run(fn, mesh, in_specs, out_specs, *args)`` wraps ``fn`` in ``jax.shard_map`` (or takes a
whole function when ``in_specs`` is None), compiles it once for the arguments and runs it; both
steps are inside :func:`tpviz.core.exercises.call`, so an endless loop while tracing or running
becomes a message, a learner's exception a :class:`~tpviz.core.exercises.Wrong`, and a stub
"not attempted". ``moving(program, mesh)`` lists the collectives that move data, each with the
mesh axes it runs along, and ``summary`` says them in words for a checker's message.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import jax

from tpviz.core import compiled
from tpviz.core.collectives import Collective
from tpviz.core.exercises import call


@dataclass(frozen=True)
class Ran:
    """The learner's result and the compiled program that produced it."""

    out: object
    program: object


def run(fn, mesh, in_specs, out_specs, *args, what: str = "your function") -> Ran:
    """Compile ``fn`` (a per-device body for ``shard_map`` when ``in_specs`` is given, a whole
    function otherwise) for ``args`` and run it once; errors become checker messages."""
    body = fn
    if in_specs is not None:
        body = jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=False)

    def compile_and_run():
        program = compiled.compile_for(body, *args)
        return Ran(jax.block_until_ready(program(*args)), program)

    if not callable(fn):
        return call(fn, what=what)  # the framework's message for a non-function
    return call(compile_and_run, what=what)


def moving(program, mesh=None) -> list[tuple[Collective, tuple[str, ...] | None]]:
    """The program's collectives that move data, each with its mesh axes (None: no mesh)."""
    found = [c for c in compiled.collectives(program) if c.moves_data]
    return [(c, compiled.mesh_axes(c, mesh) if mesh is not None else None) for c in found]


def kinds(found) -> Counter:
    return Counter(c.kind for c, _ in found)


def summary(found) -> str:
    """E.g. "1 all-gather (along 'model') and 1 reduce-scatter (along 'model')"."""
    if not found:
        return "no collectives"
    parts = []
    for c, axes in found:
        along = f" along {'×'.join(repr(a) for a in axes)}" if axes else ""
        parts.append(f"an {c.kind}{along} of {c.full_bytes:,} bytes" if c.kind[0] in "a"
                     else f"a {c.kind}{along} of {c.full_bytes:,} bytes")
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
