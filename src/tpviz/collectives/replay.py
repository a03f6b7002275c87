"""Replay a collective plan's sends on arrays: the plan proves what it computes.

:func:`replay` runs every step on NumPy arrays (all sends of a step read the state at its start);
:func:`expected` computes what the collective should leave on each device directly.
"""

from __future__ import annotations

import numpy as np

from tpviz.collectives.plan import OPS, CollectivePlan
from tpviz.core.kinds import ArrayOf, Index, OneOf
from tpviz.errors import ArgumentError


def replay(p: CollectivePlan, inputs: ArrayOf("N n"), upto: Index | None = None) -> np.ndarray:
    """Run the plan's sends on arrays and return every device's final array.

    Args:
        p: a plan.
        inputs: ``[N, n]``: device i's array, n divisible by N (for an all-gather only device
            i's chunk i counts; the rest is ignored).
        upto: stop after this many steps (default: all of them).

    Returns:
        ``[N, n]`` (``[N + 1, n]`` with a parameter server): what each device holds at the
        end. Chunks a device never received are NaN, so a wrong plan cannot pass by accident.
    """
    x = np.asarray(inputs, dtype=np.float64)
    k = p.devices
    if x.ndim != 2 or x.shape[0] != k or x.shape[1] % k:
        raise ArgumentError(f"inputs of shape {x.shape}: give [N, n] = [{k}, n], n divisible "
                            f"by {k}.")
    if upto is not None and upto > len(p.moves):
        raise ArgumentError(f"upto = {upto} is more than the plan's {len(p.moves)} steps: give "
                            f"0 to {len(p.moves)}, or None for all of them.")
    state = x.reshape(k, k, -1).copy()  # [device, chunk, element]
    if p.op == "all-gather":
        mine = state[np.arange(k), np.arange(k)].copy()
        state[:] = np.nan
        state[np.arange(k), np.arange(k)] = mine
    if p.algorithm == "parameter-server":
        state = np.concatenate([state, np.zeros((1, *state.shape[1:]))])
    for step in p.moves[:upto]:
        before = state.copy()  # every send of a step reads the state at the start of the step
        for m in step:
            c = list(m.chunks)
            state[m.dst, c] = state[m.dst, c] + before[m.src, c] if m.reduce else before[m.src, c]
    if p.op == "reduce-scatter" and upto is None:  # only chunk i of device i is defined
        owned = state[np.arange(k), np.arange(k)].copy()
        state[:] = np.nan
        state[np.arange(k), np.arange(k)] = owned
    return state.reshape(state.shape[0], -1)


def expected(op: OneOf(OPS), inputs: ArrayOf("N n")) -> np.ndarray:
    """What a collective should leave on each device (reduce-scatter: chunk i on device i, the
    rest NaN), computed directly with NumPy."""
    x = np.asarray(inputs, dtype=np.float64)
    k = x.shape[0]
    if x.shape[1] % k:
        raise ArgumentError(f"inputs of shape {x.shape}: give [N, n], n divisible by N = {k}.")
    chunks = x.reshape(k, k, -1)
    if op == "all-reduce":
        return np.broadcast_to(x.sum(0), x.shape).copy()
    if op == "all-gather":
        return np.broadcast_to(chunks[np.arange(k), np.arange(k)].reshape(-1), x.shape).copy()
    out = np.full_like(chunks, np.nan)
    out[np.arange(k), np.arange(k)] = chunks.sum(0)
    return out.reshape(k, -1)
