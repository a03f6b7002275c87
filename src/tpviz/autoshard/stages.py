"""The inter-op pass: contiguous stages × submeshes by dynamic programming (Alpa, §5.2).

A pipeline of ``p`` stages with per-microbatch times ``t_1 … t_p`` runs ``m`` microbatches in
``T_pipe = Σ_s t_s + (m − 1) · max_s t_s``: the first microbatch passes every stage once, the
others follow at the pace of the slowest. Alpa enumerates the slowest time ``t_max`` and, for
each, finds the least ``Σ_s t_s`` by dynamic programming over (first layer left ``l``, devices
left ``n``)::

    G(l, n) = min over l' > l and submesh s with t(l, l', s) ≤ t_max of
              t(l, l', s) + G(l', n − |s|),        G(L, 0) = 0

then ``T_pipe* = min over t_max of G(0, N) + (m − 1) · t_max``, for ``L`` layers on ``N``
devices. The device count is the whole constraint, as in Alpa: its submeshes ``(1, 2^i)``
inside a node and ``(n, M)`` of whole nodes always tile a cluster of nodes × M devices when
their sizes add up to its device count (Alpa's Appendix A). With a memory limit the state also
counts the stages left, as Alpa's (its Eq. 3-5): under 1F1B the stage with ``c`` stages from it
to the end holds ``min(c, m)`` microbatches' activations, so whether a stage fits depends on
its position. With one submesh shape and layers that scale perfectly, ``Σ_s t_s`` is fixed and
the best split is the most balanced one: :func:`tpviz.pipeline.plan.balance`.
:func:`tpviz.autoshard.join.submesh_costs` gives each layer's time on each submesh by the
intra-op ILP (:func:`tpviz.autoshard.solve`), joining the two levels, with the weight-gradient
all-reduce paid once per step, not once per microbatch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tpviz.core import validate as check
from tpviz.core.kinds import Any_, Bytes, Devices, Items
from tpviz.errors import ArgumentError, ArgumentTypeError
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
        """``Σ_s t_s + (m − 1) · max_s t_s``: seconds for all microbatches."""
        return sum(self.times) + (self.microbatches - 1) * max(self.times)


def _shape(s) -> tuple[int, ...]:
    if isinstance(s, tuple) and s:
        return tuple(check.integer("submeshes: a submesh's size", n) for n in s)
    try:
        return (check.integer("a submesh", s),)
    except (ArgumentError, ArgumentTypeError):
        raise ArgumentError(f"submeshes: a submesh is a device count or a shape such as (1, 2), "
                            f"got "
                            f"{s!r}.") from None


def _costs(name: str, values) -> list[float]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise ArgumentTypeError(f"{name} must be a sequence of seconds per layer (or a mapping "
                                f"submesh -> sequence), got {type(values).__name__} "
                                f"{values!r}.")
    return [check.number(f"{name}[{i}]", c, minimum=0) for i, c in enumerate(values)]


def _table(layer_costs, submeshes) -> dict[tuple[int, ...], list[float]]:
    """Per submesh, every layer's seconds on it."""
    if isinstance(layer_costs, Mapping):
        costs = {_shape(k): _costs(f"layer_costs[{k!r}]", v) for k, v in layer_costs.items()}
        missing = [s for s in submeshes if s not in costs]
        if missing:
            raise ArgumentError(f"layer_costs has no costs for submeshes {missing}; give a "
                                "sequence of per-layer seconds for each submesh.")
        costs = {s: costs[s] for s in submeshes}
    else:  # seconds on one device; a submesh of n devices takes 1/n of that
        base = _costs("layer_costs", layer_costs)
        costs = {s: [c / math.prod(s) for c in base] for s in submeshes}
    lengths = {len(v) for v in costs.values()}
    if len(lengths) != 1 or 0 in lengths:
        raise ArgumentError("every submesh needs a cost for each of the same (non-zero) number "
                            "of layers.")
    return costs


def _check(devices, microbatches, submeshes):
    devices = check.integer("devices", devices)
    microbatches = check.integer("microbatches", microbatches)
    if isinstance(submeshes, int | tuple):
        submeshes = [submeshes]
    if isinstance(submeshes, str) or not isinstance(submeshes, Iterable):
        raise ArgumentTypeError(f"submeshes must be a list of device counts or shapes such as "
                                f"[(1, 1), (1, 2)], got {submeshes!r}.")
    found = list(dict.fromkeys(_shape(s) for s in submeshes))
    if not found:
        raise ArgumentError("submeshes is empty: give at least one submesh shape.")
    return devices, microbatches, found


def _none(devices, sizes) -> ArgumentError:
    return ArgumentError(f"no split of the layers onto submeshes of {sorted(sizes)} devices "
                         f"uses exactly {devices} devices; add a submesh size or change devices.")


SEARCH_WORK = 2e6  # an upper bound of the search's steps (most stop far earlier)


def _prepared(layer_costs, devices, microbatches, submeshes, memory, memory_limit):
    """Checked arguments, the stage-time table, the layer count and the memory test that the
    DP and the brute force share (the search's work is bounded before it starts)."""
    devices, microbatches, shapes = _check(devices, microbatches, submeshes)
    costs = _table(layer_costs, shapes)
    k = len(next(iter(costs.values())))
    if len(shapes) > 1 or isinstance(layer_costs, Mapping):  # the search over stage times
        n = len(shapes)
        check.bounded("the stage search's work, (n·L²/2 stage times) × L² × N × n",
                      n * k * k / 2 * k * k * devices * n / 2, SEARCH_WORK,
                      "Group the layers into fewer, larger blocks (sum their costs), or offer "
                      "fewer submesh shapes or devices.")
    return devices, microbatches, shapes, costs, k, _fits(memory, memory_limit, k, microbatches)


def stages(layer_costs: Any_, devices: Devices, microbatches: int, submeshes: Items,
           memory: Items | None = None, memory_limit: Bytes | None = None) -> Stages:
    """Contiguous stages and a submesh for each, minimising ``Σ_s t_s + (m − 1) · max_s t_s``.

    Args:
        layer_costs: seconds per microbatch of each layer, either one sequence (on one device;
            ``n`` devices take ``1/n`` of it) or a mapping submesh → sequence.
        devices: N, the devices the stages must use together (only their count is checked, not
            that the submeshes tile a nodes × devices cluster).
        microbatches: m.
        submeshes: the submesh shapes (or device counts) a stage may take, e.g. ``[(1, 1),
            (1, 2), (2, 2)]``.
        memory: ``(weights, activations)``, each layer's bytes on one device (a submesh of n
            devices keeps 1/n of them): its weight and optimizer state, and the activations of
            one microbatch. With ``memory_limit``, a stage with c stages from it to the end
            keeps its weights and min(c, m) microbatches' activations (1F1B).
        memory_limit: bytes per device (None: no limit).

    Raises:
        ArgumentError: bad sizes or costs, or no split that uses exactly ``devices`` (and fits).
    """
    devices, microbatches, shapes, costs, k, fits = _prepared(
        layer_costs, devices, microbatches, submeshes, memory, memory_limit)
    if len(shapes) == 1 and not isinstance(layer_costs, Mapping) and memory_limit is None:
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
        found = _dp(t, k, devices, shapes, t_max, fits)
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


def _fits(memory, memory_limit, k, microbatches):
    """``fits(i, j, s, c)``: layers [i, j) on submesh s, c stages from it to the end, fit."""
    if memory_limit is None:
        return lambda i, j, s, c: True
    limit = check.number("memory_limit", memory_limit, positive=True)
    if not isinstance(memory, tuple | list) or len(memory) != 2:
        raise ArgumentTypeError("memory must be (weights, activations): two sequences of "
                                f"bytes per layer, got {memory!r}.")
    w, a = (_costs(f"memory[{n}]", v) for n, v in enumerate(memory))
    if len(w) != k or len(a) != k:
        raise ArgumentError(f"memory needs {k} weights and {k} activations, one per layer.")
    wp, ap = [0.0, *_accumulate(w)], [0.0, *_accumulate(a)]

    def fits(i, j, s, c):
        held = wp[j] - wp[i] + min(c, microbatches) * (ap[j] - ap[i])
        return held / math.prod(s) <= limit

    return fits


def _dp(t, k, devices, shapes, t_max, fits):
    """(least Σ_s t_s, stages) over layers [0, k) on exactly ``devices``, each stage ≤ t_max and
    fitting; the state (first layer, devices left, stages left) as Alpa's."""
    inf = math.inf
    # f[(i, d, c)]: least Σ t of layers [i, k) on d devices in exactly c stages
    f, choice = {(k, 0, 0): 0.0}, {}
    for i in range(k - 1, -1, -1):
        for d in range(1, devices + 1):
            for c in range(1, min(k - i, d) + 1):
                best = inf
                for s in shapes:
                    n = math.prod(s)
                    if n > d:
                        continue
                    for j in range(i + 1, k - c + 2):
                        ti = t(i, j, s)
                        if ti > t_max:
                            break  # longer stages only get slower
                        rest = f.get((j, d - n, c - 1), inf)
                        if ti + rest < best and fits(i, j, s, c):
                            best, choice[(i, d, c)] = ti + rest, (j, s)
                if best < inf:
                    f[(i, d, c)] = best
    ends = [(f[(0, devices, c)], c) for c in range(1, k + 1) if (0, devices, c) in f]
    if not ends:
        return None
    value, c = min(ends)
    out, i, d = [], 0, devices
    while i < k:
        j, s = choice[(i, d, c)]
        out.append(((i, j), s))
        i, d, c = j, d - math.prod(s), c - 1
    return value, out


def brute_stages(layer_costs: Any_, devices: Devices, microbatches: int, submeshes: Items,
                 memory: Items | None = None, memory_limit: Bytes | None = None) -> Stages:
    """Every contiguous split × submesh assignment using exactly ``devices`` (small cases)."""
    devices, microbatches, shapes, costs, k, fits = _prepared(
        layer_costs, devices, microbatches, submeshes, memory, memory_limit)
    best, best_value = None, math.inf

    def walk(i, d, picked):
        nonlocal best, best_value
        if i == k:
            n = len(picked)
            if d == 0 and all(fits(a, b, s, n - q) for q, ((a, b), s) in enumerate(picked)):
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
