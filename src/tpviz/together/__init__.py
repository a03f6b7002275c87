"""Putting it together (chapter 11): activation memory, rematerialization, 3D parallelism.

Rooms: ``memory`` (activation bytes of a layer, Korthikanti et al. 2023), ``plan`` (memory,
time and MFU of a (t, p, d, b, ZeRO, recompute) configuration), ``search`` (``best``), ``run``
(a small GPT on a 2 × 2 × 2 data × tensor × pipeline mesh in one program), ``check``, ``draw``,
``explore``, ``exercises``.
"""

from tpviz.core.publish import publish
from tpviz.together import draw
from tpviz.together.explore import explore_together, render_together
from tpviz.together.memory import RECOMPUTE, TERMS, activation_bytes
from tpviz.together.plan import CLUSTERS, MODELS, Cluster, Model, Plan, plan
from tpviz.together.search import best, candidates

__all__ = [
           "CLUSTERS",
           "MODELS",
           "RECOMPUTE",
           "TERMS",
           "Cluster",
           "Model",
           "Plan",
           "activation_bytes",
           "best",
           "candidates",
           "draw",
           "explore_together",
           "plan",
           "render_together",
]

publish(globals())
