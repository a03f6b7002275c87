"""Balanced stages: split a list of layer costs into p contiguous stages, slowest stage minimal.

A pipeline runs at the pace of its slowest stage: every other stage idles for the difference on
every microbatch. ``balance`` is exact (dynamic programming over prefix sums, O(p n^2)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from tpviz.pipeline.schedules import ScheduleError


@dataclass(frozen=True)
class Partition:
    """``bounds[k]`` is the (start, stop) range of layers on stage k."""

    costs: tuple[float, ...]  # as given (ints stay ints)
    bounds: tuple[tuple[int, int], ...]

    @property
    def stage_costs(self) -> tuple[float, ...]:
        return tuple(sum(self.costs[a:b]) for a, b in self.bounds)

    @property
    def slowest(self) -> float:
        return max(self.stage_costs)

    @property
    def imbalance_bubble(self) -> float:
        """Idle share of device-time from uneven stages alone: 1 - mean / max stage cost."""
        return 1 - sum(self.costs) / (len(self.bounds) * self.slowest)


def balance(costs: Sequence[float], stages: int) -> Partition:
    """The contiguous split of ``costs`` into ``stages`` non-empty stages whose largest stage
    cost is smallest (ties: the earliest such split).

    Raises:
        ScheduleError: fewer layers than stages, a negative cost, or stages < 1.
    """
    costs = tuple(costs)
    n = len(costs)
    if not isinstance(stages, int) or stages < 1:
        raise ScheduleError(f"stages must be a positive integer, got {stages!r}.")
    if n < stages:
        raise ScheduleError(f"{n} layers cannot fill {stages} stages (each stage needs at least "
                            f"one layer); use at most {n} stages.")
    if any(c < 0 for c in costs):
        raise ScheduleError(f"layer costs must not be negative, got {costs}.")
    prefix = [0.0, *accumulate(costs)]
    inf = float("inf")
    # best[k][i]: the smallest slowest-stage cost of layers [0, i) on k stages; cut[k][i]: where
    # the last of those k stages starts
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for i in range(k, n - (stages - k) + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    bounds, i = [], n
    for k in range(stages, 0, -1):
        j = cut[k][i]
        bounds.append((j, i))
        i = j
    return Partition(costs, tuple(reversed(bounds)))
