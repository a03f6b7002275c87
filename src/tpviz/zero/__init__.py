"""ZeRO: partition the optimizer state (stage 1), the gradients (2) and the parameters (3) of
data-parallel training over its devices (Rajbhandari et al., 2020).

Public contract: ``memory(params, devices, stage, ...)`` and ``communication(params, devices,
stage, ...)`` (plan level, instant); ``tpviz.zero.run`` trains a small model for real;
``tpviz.zero.draw`` draws the partitions and the memory.
"""

from tpviz.zero.plan import (
    MODELS,
    STAGES,
    Memory,
    ZeroError,
    communication,
    memory,
    smallest_devices,
)

__all__ = ["MODELS", "STAGES", "Memory", "ZeroError", "communication", "memory",
           "smallest_devices"]
