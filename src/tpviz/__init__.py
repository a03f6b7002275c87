"""tpviz: run, check and draw the ways a neural network is split across devices.

Start every notebook with ``tpviz.setup_devices(8)``. Every topic is a package with the same
rooms (``plan``, ``run``, ``check``, ``draw``, ``explore``, ``exercises``) built on
:mod:`tpviz.core`; ``TOPICS`` lists them in chapter order. ``tpviz.exercises`` gathers every
checker.

Topics are imported when first used (``tpviz.pipeline``, ``tpviz.explore_zero``, ...), so that
``import tpviz`` costs a chapter only the topics it touches (PEP 562).
"""

import importlib

from tpviz.devices import make_mesh, setup_devices

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
    "inference",
)
_MODULES = (*TOPICS, "core", "errors", "exercises")
# each live explorer, by the topic that defines it
_EXPLORERS = {
    "explore_layout": "layouts",
    "explore_collectives": "collectives",
    "explore_network": "machines",
    "explore_roofline": "machines",
    "explore_matmul": "matmul",
    "explore_megatron": "megatron",
    "explore_zero": "zero",
    "explore_mesh2d": "mesh2d",
    "explore_pipeline": "pipeline",
    "explore_zoo": "asyncpipe",
    "explore_context": "context",
    "explore_moe": "moe",
    "explore_together": "together",
    "explore_autoshard": "autoshard",
    "explore_decode": "inference",
}


def __getattr__(name: str):
    if name in TOPICS:  # with its exercises room, as ``tpviz.moe.exercises.DROP_CHOICES`` reads
        importlib.import_module(f"tpviz.{name}.exercises")
        return importlib.import_module(f"tpviz.{name}")
    if name in _MODULES:
        return importlib.import_module(f"tpviz.{name}")
    if name in _EXPLORERS:
        return getattr(__getattr__(_EXPLORERS[name]), name)  # its topic, as above
    raise AttributeError(f"module 'tpviz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = ["TOPICS", "make_mesh", "setup_devices", *_MODULES, *_EXPLORERS]
__version__ = "0.2.0"
