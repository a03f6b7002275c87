"""``best``: the fastest 3D configuration that fits, by search with pruning (plan level).

The space: t among the powers of two that divide the heads (at most ``max_tensor``), p among the
divisors of the layers, d = N/(t·p), microbatch b among ``microbatches`` with d·b dividing the
batch, ZeRO stages 0-3, recomputation none / selective / full, sequence parallelism off or on.
Pruning: a (t, p, d, ZeRO) whose parameter, gradient and optimizer state alone exceed the
device's memory is skipped whole; for each recomputation, microbatches grow until one no longer
fits (activations grow with b), and larger ones are not tried. ``context`` adds ring attention's
context-parallel sizes c (chapter 9; default 1 only): d = N/(t·p·c).
"""

from __future__ import annotations

from functools import lru_cache

from tpviz.core import validate
from tpviz.core.kinds import Devices, Indices, KeywordsOf, Positive
from tpviz.errors import ArgumentError
from tpviz.together.memory import RECOMPUTE
from tpviz.together.plan import CLUSTERS, MODELS, Cluster, Model, Plan, plan
from tpviz.zero import plan as zero_plan


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def candidates(model: Model | str, cluster: Cluster | str, gpus: Devices, *,
               microbatches: tuple[int, ...] = (1, 2, 4, 8), zero_stages: Indices = (0, 1, 2, 3),
               recompute: tuple[str, ...] = RECOMPUTE,
               sequence_parallel: tuple[bool, ...] = (False, True),
               max_tensor: Devices = 64, efficiency: Positive = 0.7,
               context: tuple[int, ...] = (1,)) -> list[Plan]:
    """Every configuration that fits (after pruning), each as a :class:`Plan`."""
    model = MODELS[validate.choice("model", model, MODELS)] if isinstance(model, str) else model
    cluster = (CLUSTERS[validate.choice("cluster", cluster, CLUSTERS)]
               if isinstance(cluster, str) else cluster)
    n = validate.integer("gpus", gpus)
    h, L = model.hidden, model.layers
    found = []
    for t in (k for k in _divisors(n) if k <= max_tensor and model.heads % k == 0 and
              k & (k - 1) == 0):
        for p, c in ((k, c) for k in _divisors(L) for c in context
                     if (n // t) % (k * c) == 0 and model.seq % c == 0):
            d = n // (t * p * c)
            embedding = model.vocab * h + (model.seq * h if model.learned_positions else 0)
            stage_params = (L // p * model.layer_params + embedding) / t
            for zero in zero_stages:
                if zero_plan.memory(stage_params, d * c, zero).total > cluster.memory:
                    continue  # the states alone do not fit: no b or recomputation helps
                for sp in (s for s in sequence_parallel if t > 1 or not s):
                    for rc in recompute:
                        for b in microbatches:
                            if model.batch % (d * b):
                                continue
                            one = plan(model, cluster, t, p, d, b, zero, rc, sp, efficiency,
                                       context=c)
                            if not one.fits:
                                break  # larger microbatches need more memory still
                            found.append(one)
    return found


def best(model: Model | str, cluster: Cluster | str, gpus: Devices,
         **space: KeywordsOf(candidates)) -> Plan:
    """The fastest configuration of ``model`` on ``gpus`` GPUs of ``cluster`` that fits in
    memory (keyword arguments narrow the space, see :func:`candidates`).

    Raises:
        ArgumentError: nothing fits.
    """
    found = candidates(model, cluster, gpus, **space)
    if not found:
        raise ArgumentError(f"nothing fits: {model if isinstance(model, str) else model.name} "
                            f"on {gpus} GPUs; use more GPUs or widen the search.")
    return min(found, key=lambda one: (one.step_s, one.total_memory))


@lru_cache(maxsize=64)
def cached_best(model: str, cluster: str, gpus: int) -> Plan | None:
    """:func:`best` for named presets, remembered (the explorer asks for it at every redraw)."""
    try:
        return best(model, cluster, gpus)
    except ArgumentError:
        return None
