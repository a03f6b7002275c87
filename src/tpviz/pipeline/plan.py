"""Pipeline plans: which op each device runs, in which order, and balanced stages (no devices).

``schedule(name, stages, microbatches)`` picks an order: chapter 7's from
:mod:`tpviz.pipeline.orders`, chapter 8's from :mod:`tpviz.pipeline.zoo`; the types (``Op``,
``Schedule``) live in :mod:`tpviz.pipeline.ops`. Each module sits above what it uses: ops <-
orders <- zbv <- zoo <- plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from tpviz.core import validate
from tpviz.errors import ArgumentTypeError, ScheduleError
from tpviz.pipeline import orders, zoo
from tpviz.pipeline.ops import Op, Schedule, no_gc

__all__ = ["MAX_OPS", "NAMES", "ZOO", "Op", "Partition", "Schedule", "balance", "chimera",
           "no_gc", "schedule"]


NAMES = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1")  # chapter 7
ZOO = ("chimera", "zb-h2", "zb-v", "dualpipe", "dualpipev",  # chapter 8: synchronous
       "pipedream", "2bw", "pipemare", "ampnet")  # asynchronous
MAX_OPS = 2**20  # a 64-stage, 1,024-microbatch, 4-chunk interleaved schedule has 524,288


def schedule(name: str, stages: int, microbatches: int, chunks: int = 1) -> Schedule:
    """The op order of every device for one training step.

    Args:
        name: one of ``"naive"``, ``"gpipe"``, ``"1f1b"``, ``"interleaved"``, ``"zb-h1"``, or
            of chapter 8's zoo (:mod:`tpviz.pipeline.zoo`): ``"chimera"``, ``"zb-h2"``,
            ``"zb-v"``, ``"dualpipe"``, ``"dualpipev"``, ``"pipedream"``, ``"2bw"``,
            ``"pipemare"``, ``"ampnet"``.
        stages: pipeline devices p.
        microbatches: m.
        chunks: model chunks per device v (``"interleaved"`` only; m must be a multiple of p).

    Raises:
        ScheduleError: an unknown name, a count below 1, chunks > 1 for a schedule without
            interleaving, or m not a multiple of p for the interleaved schedule.
    """
    stages, microbatches, chunks = (validate.integer(label, value, error=ScheduleError)
                                    for label, value in (("stages", stages),
                                                         ("microbatches", microbatches),
                                                         ("chunks", chunks)))
    name = validate.choice("name", name, NAMES + ZOO, error=ScheduleError)
    _bounded((3 if name in ("zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev") else 2),
             stages, microbatches, chunks)
    if name != "interleaved" and chunks != 1:
        raise ScheduleError(f"{name!r} runs one chunk per device; use 'interleaved' for "
                            f"chunks={chunks}.")
    if name == "interleaved" and microbatches % stages:
        raise ScheduleError(
            f"the interleaved schedule sends microbatches in groups of {stages} (one per stage), "
            "so "
            f"microbatches must be a multiple of {stages}; got {microbatches}. Try "
            f"{(microbatches // stages + 1) * stages}."
        )
    if name in ZOO:
        with no_gc():
            ops = zoo.build(name, stages, microbatches)
            pairs = zoo.paired(name, ops)
            ops = tuple(tuple(Op(*op) for op in row) if pairs else tuple(row) for row in ops)
        return Schedule(name, stages, microbatches, zoo.CHUNKS.get(name, 1), ops,
                        zoo.PLACEMENT.get(name, "loop"), pairs)
    build = {"naive": orders.naive, "gpipe": orders.gpipe, "1f1b": orders.one_f_one_b,
             "zb-h1": orders.zb_h1}
    with no_gc():
        ops = (orders.interleaved(stages, microbatches, chunks) if name == "interleaved"
               else build[name](stages, microbatches))
    return Schedule(name, stages, microbatches, chunks, tuple(tuple(o) for o in ops))



def _bounded(per_op: int, stages: int, microbatches: int, chunks: int) -> None:
    ops = per_op * stages * microbatches * chunks
    if ops > MAX_OPS:
        raise ScheduleError(
            f"{stages:,} stages × {microbatches:,} microbatches × {chunks} chunks make {ops:,} "
            f"ops, more than the {MAX_OPS:,} a schedule holds here (each op is a Python tuple: "
            "per million, about 2 s to build and simulate and 0.2 GB). Use fewer stages or "
            "microbatches; "
            "bubble_formula gives the bubble of any size instantly.")


def chimera(stages: int, microbatches: int, backward_ticks: int = 1) -> Schedule:
    """Chimera's op order built in lock step for a backward ``backward_ticks`` times as long
    as a forward. ``backward_ticks=1`` is ``schedule("chimera", ...)``, Li & Hoefler's order
    for t_F = t_B; with 2 the devices run the next units' forwards in the gaps a longer
    backward leaves (tpviz's greedy order, not the paper's forward doubling).

    Raises:
        ScheduleError: what ``schedule("chimera", ...)`` refuses, or backward_ticks outside 1..4.
    """
    stages, microbatches = (validate.integer(label, value, error=ScheduleError)
                            for label, value in (("stages", stages),
                                                 ("microbatches", microbatches)))
    ticks = validate.integer("backward_ticks", backward_ticks, maximum=4, error=ScheduleError)
    _bounded(2, stages, microbatches, 1)
    with no_gc():
        ops = tuple(map(tuple, zoo.build("chimera", stages, microbatches, ticks)))
    return Schedule("chimera", stages, microbatches, 1, ops, "bidirectional")


# --- balanced stages ----------------------------------------------------------------------------
# A pipeline runs at the pace of its slowest stage: every other stage idles for the difference on
# every microbatch. ``balance`` is exact (dynamic programming over prefix sums, O(p n^2)).

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
        """Idle share of device-time from uneven stages alone: 1 - mean / max stage cost (0 when
        every layer costs nothing)."""
        if self.slowest == 0:
            return 0.0
        return 1 - sum(self.costs) / (len(self.bounds) * self.slowest)


BALANCE_WORK = 2_000_000  # stages × layers² of balance's search: about a second in Python


def balance(costs: Sequence[float], stages: int) -> Partition:
    """The contiguous split of ``costs`` into ``stages`` non-empty stages whose largest stage
    cost is smallest (ties: the earliest such split).

    Raises:
        ScheduleError: fewer layers than stages, a negative cost, or stages < 1.
    """
    if isinstance(costs, str) or not hasattr(costs, "__iter__"):
        raise ArgumentTypeError(f"costs must be a list of layer costs such as [4, 1, 1, 4], got "
                                f"{type(costs).__name__} {costs!r}.")
    costs = tuple(c if isinstance(c, int) and not isinstance(c, bool) and c >= 0 else
                  validate.number(f"costs[{i}]", c, minimum=0.0, error=ScheduleError)
                  for i, c in enumerate(costs))
    n = len(costs)
    stages = validate.integer("stages", stages, error=ScheduleError)
    if n < stages:
        raise ScheduleError(f"{n} layers cannot fill {stages} stages (each stage needs at least "
                            f"one layer); use at most {n} stages.")
    validate.bounded("balance's work, stages × layers²", stages * n * n, BALANCE_WORK,
                     "Group the layers into fewer, larger blocks (sum their costs) or use "
                     "fewer stages.", error=ScheduleError)
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
