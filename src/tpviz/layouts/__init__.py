"""Chapter 0: devices, meshes and shardings.

The notation (``A[I_X, J]`` ↔ ``PartitionSpec``) and the per-device shapes and bytes live in
:mod:`tpviz.core` (every topic uses them); this topic draws layouts (``draw.sharding`` for a
plan, ``draw.array`` for a real array) and explores them (``explore_layout``).
"""

from tpviz.core.layout import blocks, bytes_per_device, replication, shard_shape, validate_spec
from tpviz.core.notation import as_spec, parse, to_notation
from tpviz.core.publish import publish
from tpviz.layouts import draw
from tpviz.layouts.explore import explore_layout

__all__ = ["as_spec", "blocks", "bytes_per_device", "draw", "explore_layout", "parse",
           "replication", "shard_shape", "to_notation", "validate_spec"]

publish(globals())
