"""The bytes a traced program holds at once: a liveness count over its jaxpr, as the learner wrote
it (before XLA reorders or fuses anything).

A value is live from the equation that makes it to the last one that reads it (the program's
inputs from the start, its outputs to the end). At each equation the count is the bytes of the
values live across it, plus its own inputs and outputs, or, for an equation that holds a program
of its own (``jit``, ``scan``, ``while``, ``cond``, a custom derivative), that program's own peak
if larger. A loop's carry is its body's input, so a carry that grows with the mesh shows here.

Used by build checkers for what one compiled program cannot say: that a ring merges each block
as it arrives (9.4), so that the bytes it holds do not grow with the number of devices. On CPU
the compiled program's temporaries do not tell (XLA keeps an unrolled loop's buffers either
way); the jaxpr keeps the learner's own order.
"""

from __future__ import annotations

import numpy as np
from jax.extend import core as jcore

from tpviz.core import verify

__all__ = ["peak_bytes", "shard_map_peak"]


def _bytes(var) -> int:
    aval = getattr(var, "aval", None)
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return 0  # a token or an effect
    try:
        return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    except TypeError:  # a dtype NumPy does not know (a PRNG key): not counted
        return 0


def _programs(eqn) -> list:
    """The jaxprs an equation holds (``jit``'s, a loop's body and condition, a cond's
    branches, a custom derivative's function)."""
    found = []

    def add(value):
        if hasattr(value, "eqns"):
            found.append(value)
        elif hasattr(getattr(value, "jaxpr", None), "eqns"):
            found.append(value.jaxpr)
        elif isinstance(value, tuple | list):
            for item in value:
                add(item)

    for value in eqn.params.values():
        add(value)
    return found


def peak_bytes(jaxpr) -> int:
    """The most bytes ``jaxpr`` (a Jaxpr or ClosedJaxpr) holds live at once."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    eqns = jaxpr.eqns
    last: dict = {}
    for i, eqn in enumerate(eqns):
        for var in eqn.invars:
            if not isinstance(var, jcore.Literal):
                last[var] = i
    for var in jaxpr.outvars:
        if not isinstance(var, jcore.Literal):
            last[var] = len(eqns)
    made = {var: -1 for var in (*jaxpr.constvars, *jaxpr.invars)}
    for i, eqn in enumerate(eqns):
        made.update((var, i) for var in eqn.outvars)
    peak = sum(_bytes(var) for var in made if made[var] < 0)
    for i, eqn in enumerate(eqns):
        inputs = {var for var in eqn.invars if not isinstance(var, jcore.Literal)}
        across = sum(_bytes(var) for var, at in made.items()
                     if at < i < last.get(var, -1) and var not in inputs)
        own = sum(map(_bytes, inputs)) + sum(map(_bytes, eqn.outvars))
        inner = max(map(peak_bytes, _programs(eqn)), default=0)
        peak = max(peak, across + max(own, inner))
    return peak


def shard_map_peak(closed) -> int:
    """The peak bytes of one device's program: the body of the only ``shard_map`` in ``closed``
    (looked for inside ``jit`` calls too)."""
    bodies = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "shard_map":
                bodies.append(eqn.params["jaxpr"])
            else:
                for inner in _programs(eqn):
                    walk(inner)

    walk(getattr(closed, "jaxpr", closed))
    verify.require(len(bodies) == 1, f"expected one shard_map, found {len(bodies)}")
    return peak_bytes(bodies[0])
