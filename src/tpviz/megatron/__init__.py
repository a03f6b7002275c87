"""Megatron-LM tensor parallelism: the sharded MLP, attention and transformer block (chapter 4).

Rooms: ``plan`` (per-device weight shapes, bytes, all-reduces; no devices), ``run`` (the
conjugate operators ``copy_to_tp_region`` = f and ``reduce_from_tp_region`` = g, the
column- and row-parallel layers, the sharded programs), ``check``, ``draw``, ``explore`` and
``exercises``.
"""

from tpviz.core.publish import publish
from tpviz.errors import ShardingError
from tpviz.megatron import draw
from tpviz.megatron.check import Check, check
from tpviz.megatron.explore import explore_megatron
from tpviz.megatron.plan import AXIS, KINDS, Plan, plan, shapes, specs
from tpviz.megatron.run import (
    attention,
    block,
    column_parallel,
    copy_to_tp_region,
    f,
    forward,
    g,
    gspmd_train_step,
    init,
    layer_norm,
    mlp,
    model,
    place,
    reduce_from_tp_region,
    reference_step,
    row_parallel,
    train_step,
)

__all__ = ["AXIS", "KINDS", "Check", "Plan", "attention", "block", "check", "column_parallel",
           "copy_to_tp_region", "draw", "explore_megatron", "f", "forward", "g",
           "gspmd_train_step", "init", "layer_norm", "mlp", "model", "place", "plan",
           "reduce_from_tp_region", "reference_step", "row_parallel", "shapes", "specs",
           "train_step"]

publish(globals(), error=ShardingError)
