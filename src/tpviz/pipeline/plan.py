"""Pipeline plans: which op each device runs, in which order, and balanced stages (no devices).

A model of ``stages * chunks`` chunks runs on ``stages`` devices; chunk ``s`` lives on device
``s % stages``. Each device runs an ordered list of ops: ``F`` (forward of one microbatch through
one chunk), ``B`` (its backward; in ``zb-h1`` only the input-gradient part) and ``W`` (the
weight-gradient part, split off by zero-bubble schedules).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from operator import itemgetter
from typing import NamedTuple

from tpviz.core import validate
from tpviz.errors import ArgumentTypeError, ScheduleError


class Op(NamedTuple):  # a tuple: cheap to build by the hundred thousand, and hashable
    kind: str  # "F", "B" or "W"
    microbatch: int  # 0-based
    chunk: int  # 0-based model chunk over all stages * chunks chunks; on device chunk % stages

    @property
    def stage(self) -> int:
        """The chunk's index (the name of earlier versions; a stage is a device)."""
        return self.chunk


@dataclass(frozen=True)
class Schedule:
    name: str
    stages: int  # devices
    microbatches: int
    chunks: int  # model chunks per device
    ops: tuple[tuple[Op, ...], ...]  # ops[d]: device d's ops in order
    placement: str = "loop"  # "loop": chunk c on device c % p; "v"; "bidirectional"
    #: paired[d]: indices i where ops[d][i] (an F) and ops[d][i+1] (a backward) are one
    #: overlapped F&B op (DualPipe): it starts when both inputs are ready; () for none
    paired: tuple[frozenset[int], ...] = ()

    @cached_property
    def has_weight_ops(self) -> bool:
        """Whether the backward pass is split into B (input gradient) and W (weight gradient)."""
        return any("W" in set(map(itemgetter(0), ops)) for ops in self.ops)

    def device(self, microbatch: int, chunk: int) -> int:
        """The device that runs ``chunk`` for ``microbatch``: ``c % p`` ("loop"); ``c`` or
        ``2p-1-c`` ("v", ZB-V and DualPipeV); ``c`` for the first half of the microbatches and
        ``p-1-c`` for the second ("bidirectional", Chimera and DualPipe)."""
        p = self.stages
        if self.placement == "v":
            return chunk if chunk < p else 2 * p - 1 - chunk
        if self.placement == "bidirectional":
            return chunk if microbatch < self.microbatches // 2 else p - 1 - chunk
        return chunk % p


def _naive(p: int, m: int) -> list[list[Op]]:
    """One microbatch at a time, all the way forward and back: no two devices ever overlap."""
    return [[op for i in range(m) for op in (Op("F", i, d), Op("B", i, d))] for d in range(p)]


def _gpipe(p: int, m: int) -> list[list[Op]]:
    """All forwards, then all backwards (GPipe): m microbatches of activations held per device."""
    return [[Op("F", i, d) for i in range(m)] + [Op("B", i, d) for i in range(m)]
            for d in range(p)]


def _one_f_one_b(p: int, m: int) -> list[list[Op]]:
    """1F1B (PipeDream-Flush): p - d - 1 warm-up forwards, then alternate F and B, then drain."""
    ops = []
    for d in range(p):
        warmup = min(p - d - 1, m)
        f = [Op("F", i, d) for i in range(m)]
        b = [Op("B", i, d) for i in range(m)]
        ops.append(f[:warmup] + _alternate(f[warmup:], b[:m - warmup]) + b[m - warmup:])
    return ops


def _interleaved(p: int, m: int, v: int) -> list[list[Op]]:
    """Megatron-LM's interleaved 1F1B: each device holds v chunks; microbatches go in groups of p.

    The k-th forward of a device is microbatch ``(k // (p v)) p + k % p`` through its chunk
    ``(k // p) % v``; backwards run the chunks in reverse. Device d warms up with
    ``2 (p - d - 1) + (v - 1) p`` forwards (the order of Megatron-LM and of PyTorch's
    ``ScheduleInterleaved1F1B``).
    """
    total = m * v
    # (microbatch, chunk) of the k-th forward and the k-th backward: the same on every device
    fwd = [((k // (p * v)) * p + k % p, (k // p) % v) for k in range(total)]
    bwd = [(mb, v - 1 - c) for mb, c in fwd]
    new = tuple.__new__  # building Op through tuple.__new__ is several times faster
    ops = []
    for d in range(p):
        f = [new(Op, ("F", mb, c * p + d)) for mb, c in fwd]
        b = [new(Op, ("B", mb, c * p + d)) for mb, c in bwd]
        warmup = min(2 * (p - d - 1) + (v - 1) * p, total)
        ops.append(f[:warmup] + _alternate(f[warmup:], b[:total - warmup]) + b[total - warmup:])
    return ops


def _alternate(first: list, second: list) -> list:
    """[a0, b0, a1, b1, ...] for two lists of the same length (slice assignment: fast)."""
    out = [None] * (2 * len(first))
    out[::2], out[1::2] = first, second
    return out


def _zb_h1(p: int, m: int) -> list[list[Op]]:
    """ZB-H1 (zero bubble, the peak memory of 1F1B): 1F1B's order of F and B (input gradients), with
    each weight-gradient W deferred to fill what would be idle time: device d holds back its
    first d W's and runs them in the drain, where 1F1B waits."""
    ops = []
    for seq in _one_f_one_b(p, m):
        d = seq[0].chunk
        out, pending = [], []
        for op in seq:
            out.append(op)
            if op.kind == "B":
                pending.append(Op("W", op.microbatch, d))
                if len(pending) > d:  # keep d W's in reserve for the drain
                    out.append(pending.pop(0))
        out += pending
        ops.append(out)
    return ops


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building hundreds of thousands of small tuples
    (none of them in a cycle): at 64 x 1024 x 4 it would otherwise run thousands of times."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


NAMES = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1")  # chapter 7
ZOO = ("chimera", "zb-h2", "zb-v", "dualpipe", "dualpipev",  # chapter 8: synchronous
       "pipedream", "2bw", "pipemare", "ampnet")  # asynchronous
MAX_OPS = 4_000_000  # a 64-stage, 1,024-microbatch, 4-chunk interleaved schedule has 524,288


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
    ops = (3 if name in ("zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev") else 2
           ) * stages * microbatches * chunks
    if ops > MAX_OPS:
        raise ScheduleError(
            f"{stages:,} stages × {microbatches:,} microbatches × {chunks} chunks make {ops:,} "
            f"ops, more than the {MAX_OPS:,} a schedule holds here (each op is a Python tuple: "
            "per million, about 2 s to build and simulate and 0.2 GB). Use fewer stages or "
            "microbatches; "
            "bubble_formula gives the bubble of any size instantly.")
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
        from tpviz.pipeline import zoo  # the zoo builds on this module's 1F1B

        with no_gc():
            ops = zoo.build(name, stages, microbatches, _one_f_one_b)
            pairs = zoo.paired(name, ops)
            ops = tuple(tuple(Op(*op) for op in row) for row in ops)
        return Schedule(name, stages, microbatches, zoo.CHUNKS.get(name, 1), ops,
                        zoo.PLACEMENT.get(name, "loop"), pairs)
    build = {"naive": _naive, "gpipe": _gpipe, "1f1b": _one_f_one_b, "zb-h1": _zb_h1}
    with no_gc():
        ops = (_interleaved(stages, microbatches, chunks) if name == "interleaved"
               else build[name](stages, microbatches))
    return Schedule(name, stages, microbatches, chunks, tuple(tuple(o) for o in ops))


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
