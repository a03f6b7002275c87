"""Automatic parallelization (chapter 12): Alpa's intra-op ILP and inter-op stage DP.

Rooms: ``graph`` (a tiny op graph; :func:`mlp`, :func:`transformer`, :class:`Builder`),
``strategies`` (each op's strategies and costs, resharding an edge), ``solve`` (the ILP with
``scipy.optimize.milp``, :func:`brute_force`), ``compare`` (data parallelism, Megatron and
greedy choice beside it, the switch point), ``stages`` (the inter-op DP), ``join`` (each
layer's time per submesh from the ILP, for the DP), ``run`` (the choice
under ``jax.jit`` with sharding constraints, and GSPMD's own propagation), ``draw``, ``explore``
and ``exercises``.
"""

from tpviz.autoshard import draw
from tpviz.autoshard.compare import (
    data_parallel,
    fixed,
    fixed_problem,
    greedy,
    is_data_parallel,
    is_megatron,
    megatron,
    same_strategies,
    switch_batch,
)
from tpviz.autoshard.explore import explore_autoshard, render_autoshard
from tpviz.autoshard.graph import Builder, Graph, Op, mlp, transformer
from tpviz.autoshard.join import submesh_costs
from tpviz.autoshard.run import Run, execute, gspmd_collectives, program
from tpviz.autoshard.solve import (
    Problem,
    Solution,
    brute_force,
    problem,
    solve,
    solve_problem,
)
from tpviz.autoshard.stages import Stages, brute_stages, stages
from tpviz.autoshard.strategies import Strategy, layouts, reshard, strategies
from tpviz.core.publish import publish

__all__ = ["Builder", "Graph", "Op", "Problem", "Run", "Solution", "Stages", "Strategy",
           "brute_force", "brute_stages", "data_parallel", "draw", "execute",
           "explore_autoshard", "fixed", "fixed_problem", "greedy", "gspmd_collectives",
           "is_data_parallel", "is_megatron", "layouts", "megatron", "mlp", "problem", "program",
           "render_autoshard", "reshard", "same_strategies", "solve", "solve_problem", "stages",
           "strategies", "submesh_costs", "switch_batch", "transformer"]

publish(globals())
