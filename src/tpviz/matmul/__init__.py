"""Sharded matrix multiplication ``Out[B, F] = In[B, D] · W1[D, F]`` (chapter 3).

Rooms: ``plan`` (the four cases, per-device shapes, FLOPs, collectives; no devices), ``run``
(``explicit``: ``jax.shard_map`` with the collectives by hand; ``gspmd``: ``jax.jit`` with the
shardings), ``check`` (both against ``x @ w`` and the compiled collectives), ``draw``,
``explore`` and ``exercises``.
"""

from tpviz.core.publish import publish
from tpviz.errors import ShardingError
from tpviz.matmul import draw
from tpviz.matmul.check import Check, check
from tpviz.matmul.explore import explore_matmul
from tpviz.matmul.plan import MatmulPlan, plan
from tpviz.matmul.run import explicit, gspmd

__all__ = ["Check", "MatmulPlan", "check", "draw", "explicit", "explore_matmul", "gspmd", "plan"]

publish(globals(), error=ShardingError)
