"""Point-to-point messages on a torus: which links they load and how many hops they take.

A chip has one ICI link per direction per torus axis. A message from ``source`` to ``target``
(coordinates in the slice) moves along every axis on which the two differ, the short way round
(on an axis with wraparound; a line has only one way). It may leave the source through every port
that points towards the target, one per such axis, so it is split into that many equal pieces
(the Scaling Book's Q5 of "How to Think About TPUs": "send half the array right and half
down", austin2025scaling): piece j walks the axes in turn starting from the j-th, so the pieces
leave and arrive on different links. On an axis with wraparound where the target is exactly
half-way round, both ways are equally short and the piece is split between them.

:func:`route` adds up, for a set of messages sent at once (a collective-permute), the bytes over
every directed link; the busiest link bounds the bandwidth term and the longest path (hops) the
latency term.
"""

from __future__ import annotations

import math
from collections import defaultdict


def _moves(shape, wrap, source, target):
    """Per axis where source and target differ: ``(axis, [(step, hops, share), ...])``."""
    out = []
    for a, (n, ring, s, t) in enumerate(zip(shape, wrap, source, target, strict=True)):
        if s == t:
            continue
        if not ring:
            out.append((a, [(1 if t > s else -1, abs(t - s), 1.0)]))
            continue
        ahead = (t - s) % n
        if 2 * ahead < n:
            out.append((a, [(1, ahead, 1.0)]))
        elif 2 * ahead > n:
            out.append((a, [(-1, n - ahead, 1.0)]))
        else:  # half-way round: both ways, half each
            out.append((a, [(1, ahead, 0.5), (-1, ahead, 0.5)]))
    return out


def route(shape, wrap, pairs, nbytes: float) -> tuple[float, int, int]:
    """Route ``nbytes`` from each ``(source, target)`` of ``pairs`` (coordinate tuples) at once.

    Returns:
        ``(busiest, hops, ports)``: the bytes over the busiest directed link, the most hops any
        message travels, and the most links any message leaves by.
    """
    load: dict[tuple, float] = defaultdict(float)
    hops = ports = 0
    for source, target in pairs:
        moves = _moves(shape, wrap, source, target)
        if not moves:
            continue
        k = len(moves)
        ports = max(ports, sum(len(ways) for _, ways in moves))
        hops = max(hops, sum(m[1][0][1] for m in moves))
        for j in range(k):  # piece j starts on the j-th moving axis
            where = list(source)
            for a, ways in moves[j:] + moves[:j]:
                for step, dist, share in ways:
                    pos = where[a]
                    for _ in range(dist):
                        load[((*where[:a], pos, *where[a + 1:]), a, step)] += nbytes / k * share
                        pos = (pos + step) % shape[a]
                where[a] = (where[a] + ways[0][0] * ways[0][1]) % shape[a]  # every way ends here
    return (max(load.values()) if load else 0.0), hops, ports


def coordinates(shape, index: int) -> tuple[int, ...]:
    """The coordinates of chip ``index`` in a slice of ``shape`` (row-major, last axis fastest)."""
    out = []
    for n in reversed(shape):
        out.append(index % n)
        index //= n
    return tuple(reversed(out))


def shift_pairs(shape, axes) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The pairs of a cyclic shift by one over the chips that vary along ``axes`` (the others at
    coordinate 0), in row-major order of those axes: chip i sends to chip i + 1, the last to the
    first, as a ring of ``jax.lax.ppermute`` does."""
    sizes = [shape[a] for a in axes]
    n = math.prod(sizes)

    def chip(i):
        c = [0] * len(shape)
        for a, x in zip(axes, coordinates(sizes, i), strict=True):
            c[a] = x
        return tuple(c)

    return [(chip(i), chip((i + 1) % n)) for i in range(n)] if n > 1 else []
