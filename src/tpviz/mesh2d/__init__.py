"""An MLP on a 2D ``(data, model)`` device mesh: data and model parallelism at once (chapter 6).

Rooms: ``plan`` (the step table: every array's sharding, per-device shape, collectives and
bytes), ``choose`` (beside data parallelism and 1D Megatron; the best mesh and the step time),
``run`` (by hand with ``shard_map``, and by GSPMD), ``check``, ``draw``, ``explore`` and
``exercises``.
"""

from tpviz.core.publish import publish
from tpviz.errors import ShardingError
from tpviz.mesh2d import draw
from tpviz.mesh2d.check import Check, as_gspmd, check, found, predicted
from tpviz.mesh2d.choose import (
    Scheme,
    best_mesh,
    compare,
    data_parallel,
    megatron_1d,
    meshes,
    smallest_batch_per_device,
    step_time,
)
from tpviz.mesh2d.explore import explore_mesh2d
from tpviz.mesh2d.plan import DATA, MODEL, SPECS, Plan, describe, plan
from tpviz.mesh2d.run import forward, gspmd_forward, place, reference

__all__ = [
    "DATA",
    "MODEL",
    "SPECS",
    "Check",
    "Plan",
    "Scheme",
    "as_gspmd",
    "best_mesh",
    "check",
    "compare",
    "data_parallel",
    "describe",
    "draw",
    "explore_mesh2d",
    "forward",
    "found",
    "gspmd_forward",
    "megatron_1d",
    "meshes",
    "place",
    "plan",
    "predicted",
    "reference",
    "smallest_batch_per_device",
    "step_time",
]

publish(globals(), error=ShardingError)
