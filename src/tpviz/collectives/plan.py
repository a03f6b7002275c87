"""Collective algorithms as lists of sends, and their α–β cost (no devices).

A plan splits the V-byte array of each device into ``N`` equal chunks and says, step by step,
which device sends which chunks to which, and whether the receiver adds them to its own
(a reduction) or keeps them (a copy). Replaying the steps on arrays
(:func:`tpviz.collectives.replay.replay`) gives each device's final state, so a plan proves
itself. The algorithms (N devices, V bytes):

================= ============== ============= =============================================
algorithm         steps          bytes sent    how
================= ============== ============= =============================================
parameter-server  2              N·V (server)  workers push V to a server, which sends the sum
naive             2(N-1)         (N-1)·V       device 0 receives from each in turn, then sends
tree              2⌈log₂N⌉       ⌈log₂N⌉·V     reduce up a binomial tree to device 0, broadcast
ring              2(N-1)         2(N-1)/N·V    reduce-scatter then all-gather round a ring
halving-doubling  2 log₂N        2(N-1)/N·V    recursive halving, then recursive doubling
================= ============== ============= =============================================

Each step costs α plus the most bytes any device sends or receives in it over β (bytes/s):
``time = Σ_steps (α + max bytes / β)``. A device sends and receives at once (full duplex) but
has one link each way. Every all-reduce must send at least 2(N-1)/N·V bytes per device
(:func:`lower_bound`); ring and halving-doubling meet the bound.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tpviz.core.collectives import Collective
from tpviz.core.kinds import Amount, Devices, OneOf, Rate, Time
from tpviz.errors import ArgumentError

# public: published by tpviz.collectives (book and benchmarks call ``plan.time``)
__all__ = ["ALGORITHMS", "MAX_DEVICES", "OPS", "CollectivePlan", "Move", "Send", "crossover",
           "line", "lower_bound", "plan", "time"]

ALGORITHMS = ("parameter-server", "naive", "tree", "ring", "halving-doubling")
OPS = ("all-reduce", "all-gather", "reduce-scatter")


class Send(NamedTuple):
    """One message of a step: ``src`` sends ``nbytes`` to ``dst``."""

    src: int
    dst: int
    nbytes: float


class Move(NamedTuple):
    """A send with what it carries: chunk numbers, and whether the receiver adds them."""

    src: int
    dst: int
    chunks: tuple[int, ...]
    reduce: bool


@dataclass(frozen=True)
class CollectivePlan:
    """An algorithm for one collective, as steps of sends.

    Attributes:
        algorithm, op: as given to :func:`plan`.
        devices: N, the devices that hold data (a parameter server is device N, one more).
        nbytes: V, the bytes of the array each device holds (its chunk, for an all-gather: V/N).
        moves: per step, the sends with their chunks (see :class:`Move`).
    """

    algorithm: str
    op: str
    devices: int
    nbytes: float
    moves: tuple[tuple[Move, ...], ...]

    @property
    def chunk_bytes(self) -> float:
        """V / N: the bytes of one chunk."""
        b = self.nbytes / self.devices
        return int(b) if float(b).is_integer() else b

    @property
    def steps(self) -> list[list[Send]]:
        """Per step, the sends ``(src, dst, nbytes)``."""
        c = self.chunk_bytes
        return [[Send(m.src, m.dst, len(m.chunks) * c) for m in step] for step in self.moves]

    def _per_step(self, which: str) -> list[dict[int, float]]:
        c, out = self.chunk_bytes, []
        for step in self.moves:
            totals: dict[int, float] = {}
            for m in step:
                key = m.src if which == "sent" else m.dst
                totals[key] = totals.get(key, 0) + len(m.chunks) * c
            out.append(totals)
        return out

    @property
    def sent(self) -> dict[int, float]:
        """Bytes each device sends over the whole algorithm."""
        total: dict[int, float] = {}
        for step in self._per_step("sent"):
            for d, b in step.items():
                total[d] = total.get(d, 0) + b
        return total

    @property
    def bytes_per_device(self) -> float:
        """The most bytes any device sends."""
        return max(self.sent.values(), default=0)

    def step_bytes(self) -> list[float]:
        """Per step, the most bytes a device sends or receives (what bounds the step)."""
        sent, got = self._per_step("sent"), self._per_step("received")
        return [max([*s.values(), *g.values()], default=0) for s, g in zip(sent, got, strict=True)]

    def time(self, alpha: Time, beta: Rate) -> Time:
        """Seconds: ``Σ_steps (α + max bytes sent or received by a device / β)``.

        Args:
            alpha: α, seconds of latency per step.
            beta: β, bytes per second of each device's link (each direction).
        """
        _positive(beta, "beta")
        _nonnegative(alpha, "alpha")
        return len(self.moves) * alpha + sum(self.step_bytes()) / beta

    def collective(self) -> Collective:
        """The same operation as :class:`tpviz.core.collectives.Collective` (its ring cost)."""
        nbytes = int(self.nbytes)
        result = {"all-reduce": nbytes, "all-gather": nbytes,
                  "reduce-scatter": nbytes // self.devices}[self.op]
        return Collective(self.op, result, self.devices, what=f"{self.algorithm} plan")


_NUMBER = int | float | np.integer | np.floating
MAX_DEVICES = 256  # the ring's 2N(N-1) moves: 130 000 at N = 256, planned in about a second


def _positive(value, name: str) -> None:  # infinity allowed: an infinitely fast link
    if isinstance(value, bool) or not isinstance(value, _NUMBER) or not value > 0:
        raise ArgumentError(f"{name}={value!r}: give a positive number.")


def _nonnegative(value, name: str) -> None:
    if (isinstance(value, bool) or not isinstance(value, _NUMBER) or not value >= 0
            or not math.isfinite(value)):
        raise ArgumentError(f"{name}={value!r}: give a finite number >= 0.")


def _ring(k: int, op: str) -> list[list[Move]]:
    """Reduce-scatter: at step s device i adds chunk (i-s-1) mod N into device i+1, so device
    c ends with the sum of chunk c. All-gather: device i passes on chunk (i-s) mod N."""
    rs = [[Move(i, (i + 1) % k, ((i - s - 1) % k,), True) for i in range(k)]
          for s in range(k - 1)]
    ag = [[Move(i, (i + 1) % k, ((i - s) % k,), False) for i in range(k)] for s in range(k - 1)]
    return {"reduce-scatter": rs, "all-gather": ag, "all-reduce": rs + ag}[op]


def _halving_doubling(k: int, op: str) -> list[list[Move]]:
    """Recursive halving: at distance N/2, N/4, ..., 1 partners i and i XOR d swap halves of the
    range they share and add; device i keeps the half holding chunk i. Doubling undoes it."""
    rs, ag = [], []
    lo = [0] * k  # per device: start of the chunk range it is responsible for
    size = k
    d = k // 2
    while d >= 1:
        size //= 2
        step = []
        for i in range(k):
            p = i ^ d
            keep = lo[i] + (size if i & d else 0)  # the half that holds chunk i
            give = lo[i] + (0 if i & d else size)
            step.append(Move(i, p, tuple(range(give, give + size)), True))
            lo[i] = keep
        rs.append(step)
        d //= 2
    lo = list(range(k))  # all-gather: device i starts with chunk i
    size, d = 1, 1
    while d < k:
        ag.append([Move(i, i ^ d, tuple(range(lo[i], lo[i] + size)), False) for i in range(k)])
        lo = [min(lo[i], lo[i ^ d]) for i in range(k)]
        size *= 2
        d *= 2
    return {"reduce-scatter": rs, "all-gather": ag, "all-reduce": rs + ag}[op]


def _tree(k: int) -> list[list[Move]]:
    """Binomial tree: at distance 1, 2, 4, ... device i + d adds everything into device i
    (i a multiple of 2d); then the same steps reversed broadcast the sum from device 0."""
    every = tuple(range(k))
    up, d = [], 1
    while d < k:
        up.append([Move(i + d, i, every, True) for i in range(0, k, 2 * d) if i + d < k])
        d *= 2
    down = [[Move(m.dst, m.src, every, False) for m in step] for step in reversed(up)]
    return up + down


def _naive(k: int) -> list[list[Move]]:
    every = tuple(range(k))
    return ([[Move(i, 0, every, True)] for i in range(1, k)]
            + [[Move(0, i, every, False)] for i in range(1, k)])


def _parameter_server(k: int) -> list[list[Move]]:
    every = tuple(range(k))
    return [[Move(i, k, every, True) for i in range(k)], [Move(k, i, every, False)
                                                          for i in range(k)]]


def plan(algorithm: OneOf(ALGORITHMS), op: OneOf(OPS), devices: Devices, nbytes: Amount
         ) -> CollectivePlan:
    """The steps of ``algorithm`` for collective ``op`` over ``devices`` devices.

    Args:
        algorithm: one of :data:`ALGORITHMS`.
        op: ``"all-reduce"``; ring and halving-doubling also ``"all-gather"`` and
            ``"reduce-scatter"``.
        devices: N >= 1 (halving-doubling: a power of two).
        nbytes: V >= 0, bytes of the array each device reduces (for an all-gather: the gathered
            array, of which each device starts with V/N).

    Raises:
        ArgumentError: an unknown algorithm or op, N < 1, halving-doubling on a N that is not a
            power of two, or a negative size.
    """
    if algorithm not in ALGORITHMS:
        raise ArgumentError(f"algorithm={algorithm!r}: use one of {', '.join(ALGORITHMS)}.")
    if op not in OPS:
        raise ArgumentError(f"op={op!r}: use one of {', '.join(OPS)}.")
    if op != "all-reduce" and algorithm not in ("ring", "halving-doubling"):
        raise ArgumentError(f"op={op!r} is planned for 'ring' and 'halving-doubling' only; "
                            f"{algorithm!r} does all-reduce.")
    if isinstance(devices, bool) or not isinstance(devices, int | np.integer) or devices < 1:
        raise ArgumentError(f"devices={devices!r}: give the number of devices N, an integer >= 1.")
    if devices > MAX_DEVICES:
        raise ArgumentError(
            f"devices={devices}: a plan lists every send of every step (a ring on N devices "
            f"has 2N(N-1) of them), so it is limited to N <= {MAX_DEVICES}. For the time on "
            "more devices use the formula: steps·α + slope·V/β, with (steps, slope) from a "
            "small N (the ring's 2(N-1) steps and 2(N-1)/N·V bytes).")
    _nonnegative(nbytes, "nbytes")
    k = int(devices)
    if algorithm == "halving-doubling" and k & (k - 1):
        low, high = 1 << (k.bit_length() - 1), 1 << k.bit_length()
        raise ArgumentError(
            f"halving-doubling needs a power of two devices, got devices={k}: use the 'ring' "
            f"(any N), or run it on {low} or {high} devices (MPICH first folds the extra "
            f"{k - low} devices into partners, then halves and doubles over {low}).")
    return CollectivePlan(algorithm, op, k, nbytes, _moves(algorithm, op, k))


@functools.lru_cache(maxsize=256)
def _moves(algorithm: str, op: str, k: int) -> tuple[tuple[Move, ...], ...]:
    if k == 1:
        return ()
    steps = {"ring": lambda: _ring(k, op), "halving-doubling": lambda: _halving_doubling(k, op),
             "tree": lambda: _tree(k), "naive": lambda: _naive(k),
             "parameter-server": lambda: _parameter_server(k)}[algorithm]()
    return tuple(tuple(s) for s in steps)


def lower_bound(devices: Devices, nbytes: Amount) -> Time:
    """2(N-1)/N · V: bytes each device must send in any all-reduce (each must send out the
    (N-1)/N of its data the others reduce, and receive as much of the others' sums)."""
    return 2 * (devices - 1) / devices * nbytes


@functools.lru_cache(maxsize=512)
def line(algorithm: str, op: str, devices: int) -> tuple[int, float]:
    """(steps, slope): ``time = steps · α + slope · V / β``, read from the plan's steps."""
    p = plan(algorithm, op, devices, devices)  # V = N: one byte per chunk
    return len(p.moves), sum(p.step_bytes()) / devices


def time(algorithm: OneOf(ALGORITHMS), devices: Devices, nbytes: Amount, alpha: Time,
         beta: Rate, op: OneOf(OPS) = "all-reduce") -> Time:
    """Seconds of ``plan(algorithm, op, devices, nbytes).time(alpha, beta)``, quickly."""
    steps, slope = line(algorithm, op, devices)
    return steps * alpha + slope * nbytes / beta


def crossover(a: OneOf(ALGORITHMS), b: OneOf(ALGORITHMS), devices: Devices, alpha: Time,
              beta: Rate, op: OneOf(OPS) = "all-reduce") -> Amount | None:
    """The message size V (bytes) at which algorithms ``a`` and ``b`` take equal time; below it
    the one with fewer steps wins, above it the one that sends fewer bytes. None when one is
    never slower (same steps, or same bytes)."""
    _nonnegative(alpha, "alpha")
    _positive(beta, "beta")
    (sa, ka), (sb, kb) = line(a, op, devices), line(b, op, devices)
    if math.isclose(ka, kb) or sa == sb:
        return None
    v = (sb - sa) * alpha * beta / (ka - kb)
    return v if v > 0 else None
