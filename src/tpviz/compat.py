"""Spellings that differ between the JAX and ipywidgets versions tpviz supports.

Every version difference lives here, each with the versions it bridges; the rest of the library
and the book call these names. Supported: JAX 0.7.2 (Colab's) to the newest, ipywidgets 7.7.1
(Colab's) and 8.x.
"""

from __future__ import annotations

import jax

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())


def all_gather_invariant(x, axis_name, *, axis: int = 0, tiled: bool = False):
    """All-gather whose result has the same value on every device of the group (type
    *invariant* over ``axis_name`` under ``check_vma``), so it can leave ``shard_map`` through
    an ``out_specs`` that does not mention the axis.

    JAX 0.6.2-0.8.1: ``jax.lax.all_gather_invariant``; later: ``all_gather(..., to="invarying")``.
    """
    if hasattr(jax.lax, "all_gather_invariant"):
        return jax.lax.all_gather_invariant(x, axis_name, axis=axis, tiled=tiled)
    return jax.lax.all_gather(x, axis_name, axis=axis, tiled=tiled, to="invarying")


def pvary(x, axis_name):
    """Mark ``x`` (a pytree) as varying over ``axis_name`` under ``check_vma``, so that
    ``jax.grad`` inside ``shard_map`` gives each device its own gradient (the gradient of an
    invariant input is summed over the axis instead).

    Older JAX (from 0.6.1): ``jax.lax.pvary``; JAX 0.10 has only
    ``jax.lax.pcast(x, axis, to="varying")``, used wherever it exists.
    """
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, axis_name, to="varying")
    return jax.lax.pvary(x, axis_name)
