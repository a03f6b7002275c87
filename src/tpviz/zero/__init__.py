"""ZeRO (chapter 5): partition the optimizer state (stage 1), the gradients (2) and the
parameters (3) of data-parallel training over its devices (Rajbhandari et al., 2020).

Rooms: ``plan`` (``memory(params, devices, stage, ...)``, ``collectives`` and
``communication``: instant), ``run`` (an MLP trained layer by layer at each stage),
``check`` (``measure(stage, layers, width)``: the compiled step's memory and collectives beside
the plan; ``train``: parameters against one device), ``draw``, ``explore`` and ``exercises``.
"""

from tpviz.core.publish import publish
from tpviz.errors import ZeroError
from tpviz.zero import check, draw
from tpviz.zero.check import Measurement, measure
from tpviz.zero.explore import explore_zero
from tpviz.zero.plan import (
    CATEGORIES,
    MODELS,
    PARTITIONED,
    PRECISIONS,
    STAGES,
    Memory,
    collectives,
    communication,
    fsdp_collectives,
    memory,
    smallest_devices,
)

__all__ = ["CATEGORIES", "MODELS", "PARTITIONED", "PRECISIONS", "STAGES", "Measurement", "Memory",
           "ZeroError", "check", "collectives", "communication", "draw", "explore_zero",
           "fsdp_collectives", "measure", "memory", "smallest_devices"]

publish(globals(), error=ZeroError)
