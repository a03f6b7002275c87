"""The inter-op pass: contiguous stages × submeshes by dynamic programming (Alpa, §5.2).

A pipeline of stages with per-microbatch times ``t_1 … t_S`` runs ``B`` microbatches in
``T = Σ t_i + (B − 1) · max t_i``: the first microbatch passes every stage once, the others
follow at the pace of the slowest. Alpa enumerates the slowest time ``t_max`` and, for each,
finds the least ``Σ t_i`` by dynamic programming over (first layer left, devices left)::

    F(k, d) = min over j > k and submesh s with t(k, j, s) ≤ t_max of
              t(k, j, s) + F(j, d − |s|),        F(K, 0) = 0

then ``T* = min over t_max of F(0, D) + (B − 1) · t_max``. The stages' submeshes must use all
``D`` devices. With one submesh shape and layers that scale perfectly, ``Σ t_i`` is fixed and
the best split is the most balanced one: :func:`tpviz.pipeline.plan.balance`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tpviz.errors import ArgumentError
from tpviz.pipeline.plan import balance


@dataclass(frozen=True)
class Stages:
    """Layers ``bounds[i] = (start, stop)`` run on a submesh ``submeshes[i]`` in ``times[i]``
    seconds per microbatch."""

    bounds: tuple[tuple[int, int], ...]
    submeshes: tuple[tuple[int, ...], ...]
    times: tuple[float, ...]
    microbatches: int

    @property
    def latency(self) -> float:
        """``Σ t_i + (B − 1) · max t_i``: seconds for all microbatches."""
        return sum(self.times) + (self.microbatches - 1) * max(self.times)


def _shape(s) -> tuple[int, ...]:
    shape = (s,) if isinstance(s, int) and not isinstance(s, bool) else s
    if not isinstance(shape, tuple) or not shape or any(
            not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in shape):
        raise ArgumentError(f"a submesh is a device count or a shape such as (1, 2), got {s!r}.")
    return shape


def _table(layer_costs, submeshes) -> dict[tuple[int, ...], list[float]]:
    """Per submesh, every layer's seconds on it."""
    if isinstance(layer_costs, Mapping):
        costs = {_shape(k): [float(c) for c in v] for k, v in layer_costs.items()}
        missing = [s for s in submeshes if s not in costs]
        if missing:
            raise ArgumentError(f"layer_costs has no costs for submeshes {missing}; give a "
                                "sequence of per-layer seconds for each submesh.")
        costs = {s: costs[s] for s in submeshes}
    else:  # seconds on one device; a submesh of n devices takes 1/n of that
        base = [float(c) for c in layer_costs]
        costs = {s: [c / math.prod(s) for c in base] for s in submeshes}
    lengths = {len(v) for v in costs.values()}
    if len(lengths) != 1 or 0 in lengths:
        raise ArgumentError("every submesh needs a cost for each of the same (non-zero) number "
                            "of layers.")
    if any(c < 0 or math.isnan(c) for v in costs.values() for c in v):
        raise ArgumentError("layer costs must be non-negative numbers.")
    return costs


def _check(devices, microbatches, submeshes):
    for name, v in (("devices", devices), ("microbatches", microbatches)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ArgumentError(f"{name} must be a positive integer, got {v!r}.")
    if isinstance(submeshes, int | tuple):
        submeshes = [submeshes]
    found = list(dict.fromkeys(_shape(s) for s in submeshes))
    if not found:
        raise ArgumentError("give at least one submesh shape.")
    return found


def _none(devices, sizes) -> ArgumentError:
    return ArgumentError(f"no split of the layers onto submeshes of {sorted(sizes)} devices "
                         f"uses exactly {devices} devices; add a submesh size or change devices.")


def stages(layer_costs, devices: int, microbatches: int, submeshes) -> Stages:
    """Contiguous stages and a submesh for each, minimising ``Σ t_i + (B − 1) · max t_i``.

    Args:
        layer_costs: seconds per microbatch of each layer, either one sequence (on one device;
            ``n`` devices take ``1/n`` of it) or a mapping submesh → sequence.
        devices: D, the devices the stages must use together.
        microbatches: B.
        submeshes: the submesh shapes (or device counts) a stage may take, e.g. ``[(1, 1),
            (1, 2), (2, 2)]``.

    Raises:
        ArgumentError: bad sizes or costs, or no split that uses exactly ``devices``.
    """
    shapes = _check(devices, microbatches, submeshes)
    costs = _table(layer_costs, shapes)
    k = len(next(iter(costs.values())))
    if len(shapes) == 1 and not isinstance(layer_costs, Mapping):
        s, n = shapes[0], math.prod(shapes[0])  # one shape: balance the stages
        p = devices // n
        if devices % n or p > k:
            raise _none(devices, [n])
        part = balance(costs[s], p)
        return Stages(part.bounds, (s,) * p, part.stage_costs, microbatches)
    prefix = {s: [0.0, *_accumulate(v)] for s, v in costs.items()}

    def t(i, j, s):
        return prefix[s][j] - prefix[s][i]

    candidates = sorted({t(i, j, s) for s in shapes for i in range(k)
                         for j in range(i + 1, k + 1)})
    best, best_value = None, math.inf
    for t_max in candidates:
        if (microbatches - 1) * t_max >= best_value:
            break  # every later t_max costs at least this much
        found = _dp(t, k, devices, shapes, t_max)
        if found is not None and found[0] + (microbatches - 1) * t_max < best_value:
            best, best_value = found[1], found[0] + (microbatches - 1) * t_max
    if best is None:
        raise _none(devices, [math.prod(s) for s in shapes])
    times = tuple(t(i, j, s) for (i, j), s in best)
    return Stages(tuple(b for b, _ in best), tuple(s for _, s in best), times, microbatches)


def _accumulate(values):
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    return out


def _dp(t, k, devices, shapes, t_max):
    """(least Σ t_i, stages) over layers [0, k) on exactly ``devices``, each stage ≤ t_max."""
    inf = math.inf
    f = [[inf] * (devices + 1) for _ in range(k + 1)]
    choice = [[None] * (devices + 1) for _ in range(k + 1)]
    f[k][0] = 0.0
    for i in range(k - 1, -1, -1):
        for d in range(1, devices + 1):
            for s in shapes:
                n = math.prod(s)
                if n > d:
                    continue
                for j in range(i + 1, k + 1):
                    ti = t(i, j, s)
                    if ti > t_max:
                        break  # longer stages only get slower
                    value = ti + f[j][d - n]
                    if value < f[i][d]:
                        f[i][d], choice[i][d] = value, (j, s)
    if f[0][devices] == inf:
        return None
    out, i, d = [], 0, devices
    while i < k:
        j, s = choice[i][d]
        out.append(((i, j), s))
        i, d = j, d - math.prod(s)
    return f[0][devices], out


def brute_stages(layer_costs, devices: int, microbatches: int, submeshes) -> Stages:
    """Every contiguous split × submesh assignment using exactly ``devices`` (small cases)."""
    shapes = _check(devices, microbatches, submeshes)
    costs = _table(layer_costs, shapes)
    k = len(next(iter(costs.values())))
    best, best_value = None, math.inf

    def walk(i, d, picked):
        nonlocal best, best_value
        if i == k:
            if d == 0:
                plan = Stages(tuple(b for b, _ in picked), tuple(s for _, s in picked),
                              tuple(sum(costs[s][a:b]) for (a, b), s in picked), microbatches)
                if plan.latency < best_value:
                    best, best_value = plan, plan.latency
            return
        for j in range(i + 1, k + 1):
            for s in shapes:
                if math.prod(s) <= d:
                    walk(j, d - math.prod(s), [*picked, ((i, j), s)])

    walk(0, devices, [])
    if best is None:
        raise _none(devices, [math.prod(s) for s in shapes])
    return best

