"""Expert parallelism: a mixture-of-experts layer routed, dispatched by all-to-all (chapter 10).

Rooms: ``plan`` (capacity, routing and drops in NumPy, the load-balancing loss, per-device
shapes and all-to-alls; no devices), ``run`` (the layer by ``shard_map`` + ``all_to_all``, as
GShard's einsums under GSPMD, and on one device), ``check``, ``draw``, ``explore``,
``exercises``.
"""

from tpviz.core.publish import publish
from tpviz.errors import ShardingError
from tpviz.moe import draw
from tpviz.moe.check import Check, check
from tpviz.moe.explore import explore_moe, render_moe
from tpviz.moe.plan import (
    AXIS,
    Plan,
    Routing,
    aux_loss,
    capacity,
    keep,
    plan,
    route,
    softmax,
    top_k,
)
from tpviz.moe.run import (
    forward,
    gshard_layer,
    gspmd_forward,
    gspmd_train_step,
    init,
    layer,
    place,
    reference,
    reference_step,
    specs,
    train_step,
)
from tpviz.moe.synthetic import skewed_logits

__all__ = ["AXIS", "Check", "Plan", "Routing", "aux_loss", "capacity", "check", "draw",
           "explore_moe", "forward", "gshard_layer", "gspmd_forward", "gspmd_train_step", "init",
           "keep", "layer", "place", "plan", "reference", "reference_step", "render_moe", "route",
           "skewed_logits", "softmax", "specs", "top_k", "train_step"]

publish(globals(), error=ShardingError)
