"""tpviz: run, check and draw the ways a neural network is split across devices.

Start every notebook with ``tpviz.setup_devices(8)``. Every topic is a package with the same
rooms (``plan``, ``run``, ``check``, ``draw``, ``explore``, ``exercises``) built on
:mod:`tpviz.core`; ``TOPICS`` lists them in chapter order. ``tpviz.exercises`` gathers every
checker.
"""

from tpviz import (
    asyncpipe,
    autoshard,
    collectives,
    context,
    core,
    errors,
    exercises,
    layouts,
    machines,
    matmul,
    megatron,
    mesh2d,
    moe,
    pipeline,
    together,
    zero,
)
from tpviz.asyncpipe import explore_zoo
from tpviz.autoshard import explore_autoshard
from tpviz.collectives import explore_collectives
from tpviz.context import explore_context
from tpviz.devices import make_mesh, setup_devices
from tpviz.layouts import explore_layout
from tpviz.machines import explore_network, explore_roofline
from tpviz.matmul import explore_matmul
from tpviz.megatron import explore_megatron
from tpviz.mesh2d import explore_mesh2d
from tpviz.moe import explore_moe
from tpviz.pipeline import explore_pipeline
from tpviz.together import explore_together
from tpviz.zero import explore_zero

# the topics, in chapter order
TOPICS = (
    "layouts",
    "collectives",
    "machines",
    "matmul",
    "megatron",
    "zero",
    "mesh2d",
    "pipeline",
    "asyncpipe",
    "context",
    "moe",
    "together",
    "autoshard",
)

__all__ = ["TOPICS", "asyncpipe", "autoshard", "collectives", "core", "errors", "exercises",
           "explore_autoshard", "explore_collectives", "explore_layout", "explore_matmul",
           "explore_megatron", "explore_mesh2d", "explore_moe", "explore_network",
           "explore_pipeline", "explore_roofline", "explore_together", "explore_zero",
           "explore_zoo", "layouts", "machines", "make_mesh", "matmul", "megatron", "mesh2d",
           "moe", "pipeline", "setup_devices", "together", "zero"]
__all__ = ["TOPICS", "autoshard", "collectives", "context", "core", "errors", "exercises",
           "explore_autoshard", "explore_collectives", "explore_context", "explore_layout",
           "explore_matmul",
           "explore_megatron", "explore_mesh2d", "explore_moe", "explore_pipeline",
           "explore_together", "explore_zero", "layouts", "make_mesh", "matmul", "megatron",
           "mesh2d", "moe", "pipeline", "setup_devices", "together", "zero"]
__version__ = "0.2.0"
