"""Gradient bucketing: all-reduce gradients in buckets while the backward pass goes on.

The backward pass produces the gradients one layer after another, last layer first. PyTorch DDP
(Li et al., 2020) puts them, in that order, into buckets of about ``bucket_bytes`` and starts a
bucket's all-reduce as soon as its last gradient is ready, so communication overlaps the rest
of the backward pass. One communication stream runs the all-reduces in order. A small bucket
pays α for each of many all-reduces; a large one waits long to fill, and the last bucket's
all-reduce cannot overlap anything. :func:`simulate` gives the timeline and the *exposed*
communication: the time after the backward pass ends until the last all-reduce ends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tpviz.collectives.plan import time as collective_time
from tpviz.core.kinds import Bandwidth, Bytes, Devices, Time
from tpviz.errors import ArgumentError


@dataclass(frozen=True)
class Bucket:
    """One all-reduce: which gradients (indices in backward order), bytes, and when it is
    ready (its last gradient computed), starts and ends (seconds from the backward's start)."""

    grads: tuple[int, ...]
    nbytes: float
    ready: float
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """The backward pass and its bucketed all-reduces."""

    buckets: tuple[Bucket, ...]
    grad_ready: tuple[float, ...]

    @property
    def backward_end(self) -> float:
        return self.grad_ready[-1] if self.grad_ready else 0.0

    @property
    def end(self) -> float:
        """When the last all-reduce ends (the optimizer can step)."""
        return max([self.backward_end, *(b.end for b in self.buckets)])

    @property
    def exposed(self) -> float:
        """Seconds of communication not hidden behind the backward pass."""
        return self.end - self.backward_end


def assign(grad_bytes: Sequence[float], bucket_bytes: Bytes) -> list[tuple[int, ...]]:
    """Gradients (in backward order) into buckets: a bucket closes once it holds at least
    ``bucket_bytes`` (0: one bucket per gradient; ``math.inf``: one bucket)."""
    if not bucket_bytes >= 0:
        raise ArgumentError(f"bucket_bytes={bucket_bytes!r}: give a size >= 0 (math.inf for "
                            "one bucket).")
    out, current, size = [], [], 0.0
    for i, b in enumerate(grad_bytes):
        current.append(i)
        size += b
        if size >= bucket_bytes:
            out.append(tuple(current))
            current, size = [], 0.0
    if current:
        out.append(tuple(current))
    return out


def simulate(grad_times: Sequence[float], grad_bytes: Sequence[float], bucket_bytes: Bytes, *,
             devices: Devices, alpha: Time, beta: Bandwidth, algorithm: str = "ring") -> Timeline:
    """The timeline of a backward pass with bucketed all-reduces.

    Args:
        grad_times: seconds of backward compute for each gradient, in backward order.
        grad_bytes: bytes of each gradient, in the same order.
        bucket_bytes: the bucket size (DDP's ``bucket_cap_mb``, in bytes).
        devices, alpha, beta, algorithm: the all-reduce, timed by its plan
            (:func:`tpviz.collectives.plan.time`); ``beta=math.inf`` for infinite bandwidth.
    """
    if len(grad_times) != len(grad_bytes):
        raise ArgumentError(f"{len(grad_times)} grad_times but {len(grad_bytes)} grad_bytes: "
                            "give one time and one size per gradient.")
    if any(not t >= 0 for t in grad_times) or any(not b >= 0 for b in grad_bytes):
        raise ArgumentError("grad_times and grad_bytes must be >= 0.")
    ready, t = [], 0.0
    for dt in grad_times:
        t += dt
        ready.append(t)
    buckets, free = [], 0.0  # free: when the communication stream is next idle
    for grads in assign(grad_bytes, bucket_bytes):
        nbytes = sum(grad_bytes[i] for i in grads)
        start = max(ready[grads[-1]], free)
        free = start + collective_time(algorithm, devices, nbytes, alpha, beta)
        buckets.append(Bucket(grads, nbytes, ready[grads[-1]], start, free))
    return Timeline(tuple(buckets), tuple(ready))


def candidates(grad_bytes: Sequence[float]) -> list[float]:
    """Bucket sizes worth trying: every sum of consecutive gradients (each gives a different
    split), and ``math.inf``."""
    sums = {sum(grad_bytes[i:j]) for i in range(len(grad_bytes))
            for j in range(i + 1, len(grad_bytes) + 1)}
    return [*sorted(sums), math.inf]


def best_bucket(grad_times: Sequence[float], grad_bytes: Sequence[float], *, devices: Devices,
                alpha: Time, beta: Bandwidth, algorithm: str = "ring",
                sizes: Sequence[float] | None = None) -> tuple[float, Timeline]:
    """The bucket size (among ``sizes``, default :func:`candidates`) with the least exposed
    communication, and its timeline; on a tie, the later size in ``sizes`` (for the default,
    sorted candidates: the largest, with the fewest all-reduces)."""
    best = None
    for size in sizes if sizes is not None else candidates(grad_bytes):
        line = simulate(grad_times, grad_bytes, size, devices=devices, alpha=alpha, beta=beta,
                        algorithm=algorithm)
        if best is None or line.exposed <= best[1].exposed + 1e-15:
            best = (size, line)
    if best is None:
        raise ArgumentError("sizes is empty: give at least one bucket size.")
    return best
