"""The data of a pipeline plan: an op, a schedule (every device's ops in order), and a pause of
the garbage collector while building them by the hundred thousand. The bottom of the
pipeline package: every other module of it may import this one; it imports none of them.

A model of ``stages * chunks`` chunks runs on ``stages`` devices; chunk ``s`` lives on device
``s % stages``. Each device runs an ordered list of ops: ``F`` (forward of one microbatch through
one chunk), ``B`` (its backward; in ``zb-h1`` only the input-gradient part) and ``W`` (the
weight-gradient part, split off by zero-bubble schedules).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter
from typing import NamedTuple

from tpviz.core.kinds import Index


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

    def device(self, microbatch: Index, chunk: Index) -> int:
        """The device that runs ``chunk`` for ``microbatch``: ``c % p`` ("loop"); ``c`` or
        ``2p-1-c`` ("v", ZB-V and DualPipeV); ``c`` for the first half of the microbatches and
        ``p-1-c`` for the second ("bidirectional", Chimera and DualPipe)."""
        p = self.stages
        if chunk >= p * self.chunks or microbatch >= self.microbatches:
            from tpviz.errors import ScheduleError

            raise ScheduleError(f"chunk = {chunk}, microbatch = {microbatch}: this schedule has "
                                f"chunks 0 to {p * self.chunks - 1} and microbatches 0 to "
                                f"{self.microbatches - 1}.")
        if self.placement == "v":
            return chunk if chunk < p else 2 * p - 1 - chunk
        if self.placement == "bidirectional":
            return chunk if microbatch < self.microbatches // 2 else p - 1 - chunk
        return chunk % p


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
