"""tpviz: run, check and draw the ways a neural network is split across devices.

Start every notebook with ``tpviz.setup_devices(8)``. The topics live in submodules:
``layout`` (sharding notation, shapes, bytes), ``hlo`` (collectives of the compiled program),
``matmul`` (sharded matrix multiplication), ``megatron`` (tensor-parallel MLP, attention,
block), ``mesh2d`` (an MLP on a 2D data × model mesh), ``pipeline`` (schedules, simulator,
a pipelined model), ``zero`` (ZeRO stages 0-3), ``cost`` (compute versus communication time),
``draw`` (figures), ``explore`` (widgets) and ``exercises`` (checkers).
"""

from tpviz import (
    cost,
    draw,
    errors,
    exercises,
    hlo,
    layout,
    matmul,
    megatron,
    mesh2d,
    pipeline,
    zero,
)
from tpviz.devices import make_mesh, setup_devices
from tpviz.explore import (
    explore_layout,
    explore_matmul,
    explore_megatron,
    explore_mesh2d,
    explore_pipeline,
    explore_zero,
)

__all__ = ["cost", "draw", "errors", "exercises", "explore_layout", "explore_matmul",
           "explore_megatron", "explore_mesh2d", "explore_pipeline", "explore_zero", "hlo",
           "layout", "make_mesh", "matmul", "megatron", "mesh2d", "pipeline", "setup_devices",
           "zero"]
__version__ = "0.1.0"
