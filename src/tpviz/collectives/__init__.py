"""Collectives and data parallelism (chapter 1).

Rooms: ``plan`` (collective algorithms as steps of sends, their α–β cost, the crossover
between them; no devices), ``replay`` (the steps run on arrays), ``buckets`` (gradient
bucketing: the backward pass and its bucketed all-reduces on a timeline), ``run`` (ring and
halving-doubling with ``ppermute`` under ``jax.shard_map``; data-parallel training steps with
``shard_map`` and with ``jax.jit``), ``check`` (against ``psum``, the single-device step and the
compiled programs), ``draw``, ``explore`` and ``exercises``. ``torch_run`` (imported on its own:
it needs torch) runs PyTorch workers on local gloo processes.
"""

from tpviz.collectives import buckets, draw
from tpviz.collectives.check import check_dp, check_plan
from tpviz.collectives.explore import explore_collectives, render_collectives
from tpviz.collectives.plan import ALGORITHMS, CollectivePlan, crossover, lower_bound, plan
from tpviz.collectives.replay import expected, replay
from tpviz.collectives.run import dp_step_jit, dp_step_shard_map, follow, program
from tpviz.core.publish import publish

__all__ = ["ALGORITHMS", "CollectivePlan", "buckets", "check_dp", "check_plan", "crossover",
           "dp_step_jit", "dp_step_shard_map", "draw", "expected", "explore_collectives",
           "follow", "lower_bound", "plan", "program", "render_collectives", "replay"]

publish(globals())
