"""Sequence and context parallelism (chapter 9): Megatron's sequence parallelism, ring
attention and DeepSpeed-Ulysses, run on a mesh, compiled and compared.

Rooms: ``plan`` (collectives, causal work per device; no devices), ``run`` (the schemes in
``jax.shard_map``, the online-softmax ``combine``, the single-device references), ``check``.
"""

from tpviz.context.check import Checked, check, inputs, mesh_of
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

__all__ = ["AXIS", "LAYOUTS", "SCHEMES", "Checked", "attention", "block_attention",
           "causal_work", "check", "check_sizes", "combine", "inputs", "mesh_of", "plan",
           "program", "reference", "ring_attention", "sequence_parallel_block",
           "ulysses_attention", "with_gradients", "zigzag_order"]
