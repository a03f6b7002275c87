"""ZeRO (chapter 4): partition the optimizer state (stage 1), the gradients (2) and the
parameters (3) of data-parallel training over its devices (Rajbhandari et al., 2020).

Rooms: ``plan`` (``memory(params, devices, stage, ...)``, ``collectives`` and
``communication``: instant), ``run`` (a small model trained for real at each stage, checked),
``draw``, ``explore`` and ``exercises``.
"""

from tpviz.errors import ZeroError
from tpviz.zero import draw
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
    memory,
    smallest_devices,
)

__all__ = ["CATEGORIES", "MODELS", "PARTITIONED", "PRECISIONS", "STAGES", "Memory", "ZeroError",
           "collectives", "communication", "draw", "explore_zero", "memory", "smallest_devices"]
