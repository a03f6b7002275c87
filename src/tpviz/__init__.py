"""tpviz: run, check and draw the ways a neural network is split across devices.

Start every notebook with ``tpviz.setup_devices(8)``. Every topic is a package with the same
rooms (``plan``, ``run``, ``check``, ``draw``, ``explore``, ``exercises``) built on
:mod:`tpviz.core`: ``layouts`` (chapter 0), ``matmul``, ``megatron``, ``zero``, ``mesh2d``,
``pipeline``. ``tpviz.exercises`` gathers every checker.
"""

from tpviz import compat, core, errors, exercises, layouts, matmul, megatron, mesh2d, pipeline, zero
from tpviz.devices import make_mesh, setup_devices
from tpviz.layouts import explore_layout
from tpviz.matmul import explore_matmul
from tpviz.megatron import explore_megatron
from tpviz.mesh2d import explore_mesh2d
from tpviz.pipeline import explore_pipeline
from tpviz.zero import explore_zero

TOPICS = ("layouts", "matmul", "megatron", "zero", "mesh2d", "pipeline")  # in chapter order

__all__ = ["TOPICS", "compat", "core", "errors", "exercises", "explore_layout", "explore_matmul",
           "explore_megatron", "explore_mesh2d", "explore_pipeline", "explore_zero", "layouts",
           "make_mesh", "matmul", "megatron", "mesh2d", "pipeline", "setup_devices", "zero"]
__version__ = "0.2.0"
