"""Sequence and context parallelism (chapter 9): Megatron's sequence parallelism, ring
attention, DeepSpeed-Ulysses, Llama 3's all-gather and usp (Ulysses inside, a ring across), run
on a mesh, compiled and compared.

Rooms: ``plan`` (collectives, causal work per device; no devices), ``compare`` (bytes, time,
overlap and memory per scheme, priced on the book's systems), ``ring`` (ring attention's
forward and its recomputing backward), ``run`` (the other schemes in ``jax.shard_map``, the
single-device references), ``check`` (and ``loops``: collectives per loop trip and their
overlap; ``balance``: FLOPs per device), ``draw``, ``explore``, ``exercises``.
"""

from tpviz.context import balance, compare, draw, loops
from tpviz.context.check import Checked, check, inputs, measure, mesh_of, temporaries
from tpviz.context.explore import explore_context, render_context
from tpviz.context.plan import (
    AXIS,
    LAYOUTS,
    SCHEMES,
    causal_work,
    check_sizes,
    plan,
    striped_order,
    zigzag_order,
)
from tpviz.context.ring import block_attention, block_gradients, combine, ring_attention
from tpviz.context.run import (
    allgather_attention,
    attention,
    program,
    reference,
    sequence_parallel_block,
    ulysses_attention,
    usp_attention,
    with_gradients,
)
from tpviz.core.publish import publish
from tpviz.errors import ShardingError

__all__ = ["AXIS", "LAYOUTS", "SCHEMES", "Checked", "allgather_attention", "attention",
           "balance", "block_attention", "block_gradients", "causal_work", "check",
           "check_sizes", "combine", "compare", "draw", "explore_context", "inputs", "loops",
           "measure", "mesh_of", "plan", "program", "reference", "render_context",
           "ring_attention", "sequence_parallel_block", "striped_order", "temporaries",
           "ulysses_attention", "usp_attention", "with_gradients", "zigzag_order"]

publish(globals(), error=ShardingError)
