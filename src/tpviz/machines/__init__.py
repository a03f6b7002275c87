"""Chapter 2: rooflines, links and topologies. The model itself is :mod:`tpviz.core.hardware`;
this topic draws it (``draw``), explores it (``explore_network``, ``explore_roofline``) and
checks the chapter's exercises (``exercises``)."""

from tpviz.core.publish import publish
from tpviz.machines import draw
from tpviz.machines.explore import (
    MACHINES,
    explore_network,
    explore_roofline,
    render_network,
    render_roofline,
)

__all__ = ["MACHINES", "draw", "explore_network", "explore_roofline", "render_network",
           "render_roofline"]

publish(globals())
