"""Sequence and context parallelism (chapter 9): Megatron's sequence parallelism, ring
attention and DeepSpeed-Ulysses, run on a mesh, compiled and compared.

Rooms: ``plan`` (collectives, causal work per device; no devices), ``compare`` (bytes, time,
overlap and memory per scheme, priced on the book's systems), ``run`` (the schemes in
``jax.shard_map``, the online-softmax ``combine``, the single-device references), ``check``
(and ``loops``: collectives per loop trip; ``balance``: FLOPs per device), ``draw``,
``explore``, ``exercises``.
"""

from tpviz.context import balance, compare, draw
from tpviz.context.check import Checked, check, inputs, mesh_of, temporaries
from tpviz.context.explore import explore_context, render_context
from tpviz.context.plan import AXIS, LAYOUTS, SCHEMES, causal_work, check_sizes, plan, zigzag_order
from tpviz.context.run import (
    attention,
    block_attention,
    combine,
    program,
    reference,
    ring_attention,
    sequence_parallel_block,
    ulysses_attention,
    with_gradients,
)
from tpviz.core.publish import publish
from tpviz.errors import ShardingError

__all__ = ["AXIS", "LAYOUTS", "SCHEMES", "Checked", "attention", "balance", "block_attention",
           "causal_work", "check", "check_sizes", "combine", "compare", "draw",
           "explore_context", "inputs", "mesh_of", "plan", "program", "reference",
           "render_context", "ring_attention", "sequence_parallel_block", "temporaries",
           "ulysses_attention", "with_gradients", "zigzag_order"]

publish(globals(), error=ShardingError)
