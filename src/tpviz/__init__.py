"""tpviz: run, check and draw the ways a neural network is split across devices.

Start every notebook with ``tpviz.setup_devices(8)``. The topics live in submodules:
``layout`` (sharding notation, shapes, bytes), ``hlo`` (collectives of the compiled program),
``draw`` (figures), ``explore`` (widgets) and ``exercises`` (checkers).
"""

from tpviz import draw, errors, exercises, hlo, layout
from tpviz.devices import make_mesh, setup_devices
from tpviz.explore import explore_layout

__all__ = ["draw", "errors", "exercises", "explore_layout", "hlo", "layout", "make_mesh",
           "setup_devices"]
__version__ = "0.1.0"
