"""The join of Alpa's two levels: each layer's time on each submesh, from the intra-op ILP, as
the inter-op DP (:func:`tpviz.autoshard.stages`) takes it."""

from __future__ import annotations

from tpviz.autoshard.solve import GRADIENT_SYNC, solve
from tpviz.autoshard.stages import _check
from tpviz.core import validate as check
from tpviz.core.cost import System
from tpviz.core.kinds import Items
from tpviz.errors import ArgumentError


def submesh_costs(layers: Items, submeshes: Items, system: System, microbatches: int = 1,
                  in_ilp: bool = False) -> dict[tuple[int, ...], list[float]]:
    """Each layer's seconds per microbatch on each submesh, from the intra-op ILP: the cost of
    :func:`tpviz.autoshard.solve` on a mesh of the submesh's shape (``(1, n)``: one axis "X"
    of n; ``(a, b)``: "X" of a × "Y" of b), with its weight-gradient all-reduces divided by
    ``microbatches``, m: a pipeline accumulates the gradients of its m microbatches and
    reduces them once per step. Alpa's stage profiling does this (its HLO cost model,
    ``EstimateHloModuleCost``, divides the gradient-synchronisation all-reduces by the number
    of microbatches), while its ILP chooses the strategies without it
    (``grad_acc_num_micro_batches`` is "temporarily" disabled in ``auto_sharding.py``): so here
    by default. ``in_ilp=True`` divides them in the ILP's objective too, which may change the
    strategies it picks. Alpa profiles each candidate stage's whole subgraph; here a stage's
    time is the sum of its layers' (no resharding between them is charged).

    Args:
        layers: one graph per layer (e.g. ``auto.mlp(..., layers=1)``).
        submeshes: shapes such as ``[(1, 1), (1, 2), (2, 4)]``.
        system: a :class:`tpviz.core.cost.System` or its name.
        microbatches: m, the microbatches whose gradients are reduced together.
        in_ilp: divide in the ILP's objective as well, not only in the stage's cost.
    """
    shapes = _check(1, 1, submeshes)[2]
    m = check.integer("microbatches", microbatches)
    in_ilp = check.flag("in_ilp", in_ilp)
    graphs = list(layers)
    if not graphs:
        raise ArgumentError("layers is empty; give one graph per layer.")

    def mesh(s):
        sizes = [n for n in s if n > 1] or [1]
        return dict(zip(("X", "Y", "Z"), sizes, strict=False))

    seen: dict[tuple[int, tuple[int, ...]], float] = {}  # a graph repeated is solved once

    def cost(g, s):
        if (id(g), s) not in seen:
            if in_ilp:
                seen[(id(g), s)] = solve(g, mesh(s), system, microbatches=m).cost
            else:
                found = solve(g, mesh(s), system)
                sync = found.problem.time(c for c in found.backward if c.what == GRADIENT_SYNC)
                seen[(id(g), s)] = found.cost - sync * (1 - 1 / m)
        return seen[(id(g), s)]

    return {s: [cost(g, s) for g in graphs] for s in shapes}
