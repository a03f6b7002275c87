"""Causal ring attention's work per device, read from compiled programs' cost analysis.

Under a causal mask a query attends only to earlier keys. With the contiguous layout device i
holds block i, so it needs blocks 0 … i: the last device does N blocks of work, the first one.
Two layouts give every device the same work: zigzag (device i holds chunks i and 2N-1-i of 2N)
and striped attention's (token t on device t mod N, Brandon et al. 2023), which skips the early
half of its queries against the late half of each block's keys (:func:`tpviz.context.ring.pairs`).
SPMD compiles one program for all devices, so each device's own schedule is compiled here as a
single-device program (:func:`device_program`: its steps, skipping what the mask hides entirely
at two tiles per block, as a FlashAttention kernel skips masked tiles; ``causal_work(...,
tiles=2)`` counts them) and its FLOPs read from XLA's cost analysis of
that program: by default of the program as lowered, the HLO handed to the compiler (fast: no
compilation); with ``compile=True`` of the optimized program, whose fusions add or remove a few
elementwise FLOPs but not the matmuls that make the imbalance.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from tpviz.context.plan import check_sizes
from tpviz.context.ring import own_block, step
from tpviz.core import compiled
from tpviz.core.kinds import COMPILED, HELD, Devices, Index, Size
from tpviz.core.validate import bounded


def device_program(me: Index, devices: Devices, layout: str = "contiguous"):
    """Device ``me``'s causal ring attention as one device's program: ``fn(q, k, v)`` with
    ``q[B, S/N, n_h, d_h]`` its queries and ``k, v[N, B, S/N, n_h, d_h]`` every device's block
    (in the order they reach it), each step computing the parts of the block that
    :func:`tpviz.context.ring.pairs` names (contiguous: a later device's block is skipped)."""
    n = devices

    def fn(q, k, v):
        o, lse = own_block(q, jnp.stack([k[me], v[me]]), me, n, layout, True)
        for s in range(1, n):
            src = (me - s) % n
            o, lse = step(q, jnp.stack([k[src], v[src]]), o, lse, src, me, n, layout, True)
        return o

    return fn


def _flops(fn, *args, compile: bool) -> float:
    analysis = (compiled.compile_for(fn, *args) if compile
                else jax.jit(fn).lower(*args)).cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return float(analysis["flops"])


def flops_per_device(sequence: Size(2**14, COMPILED), heads: Size(64, HELD),
                     devices: Size(64, COMPILED) = 8, layout: str = "contiguous",
                     head_dim: Size(1024, HELD) = 8, compile: bool = False) -> list[float]:
    """FLOPs of each device's causal ring attention (forward), from XLA's cost analysis of each
    device's program (lowered, or with ``compile`` compiled).

    Raises:
        ArgumentError, ShardingError: sizes that do not split (``plan.check_sizes``).
    """
    z = check_sizes("ring", sequence, heads, devices, layout=layout)
    bounded("sequence × heads × head_dim (the keys and values held)", sequence * heads * head_dim,
            2**25, "Use fewer tokens, heads or a narrower head: the FLOPs scale from there.")
    n, a, layout, c = z.devices, z.heads, z.layout, z.sequence // z.devices
    q = np.zeros((1, c, a, head_dim), np.float32)
    kv = np.zeros((n, 1, c, a, head_dim), np.float32)
    return [_flops(device_program(i, n, layout), q, kv, kv, compile=compile) for i in range(n)]


def imbalance(flops: Sequence[float]) -> float:
    """The busiest device's work over the mean: the step waits for the busiest."""
    flops = np.asarray(flops, float)
    return float(flops.max() / flops.mean())
