"""Torch's pipeline orders without processes: each schedule class of
``torch.distributed.pipelining`` computes every rank's ``pipeline_order`` when it is built, from
the number of ranks, stages and microbatches alone. Built here on stand-in stages (the few
attributes the constructors read), it gives the order at any p and m in milliseconds.

For the multi-stage schedules (interleaved 1F1B, looped BFS, the zero-bubble ones, DualPipeV)
the runtime executes this order; chapter 13 checks it op by op against what the stages ran on 4
processes. GPipe and 1F1B run their own loop, and their ``pipeline_order`` only describes it
(1F1B's, off by one microbatch on the last rank in torch 2.11 and 2.13).
"""

from __future__ import annotations

import warnings

from tpviz.core import validate
from tpviz.errors import ArgumentError
from tpviz.pytorch.plan import TORCH_SCHEDULES


class _Stage:
    """What a schedule's constructor reads from each of its stages on rank 0."""

    def __init__(self, index: int, stages: int, ranks: int):
        import torch

        self.stage_index, self.num_stages = index, stages
        self.group_size, self.group_rank = ranks, 0
        self.is_first, self.is_last = index == 0, index == stages - 1
        self.submod = torch.nn.Identity()  # the zero-bubble schedules check it is a Module


def _orders_only(cls):
    """``cls`` without the step that lowers its order to one with sends and receives (nine
    tenths of the build time, and not the order): the multi-stage schedules call it last in
    their constructors, once ``pipeline_order`` is complete. The chapter checks the orders so
    built against those of the schedules its processes built."""
    if not hasattr(cls, "_prepare_schedule_with_comms"):
        return cls
    return type(cls.__name__, (cls,), {"_prepare_schedule_with_comms":
                                       lambda self, *args, **kwargs: None})


def torch_order(torch_name: str, ranks: int, microbatches: int) -> dict[int, list[str | None]]:
    """Torch's ``pipeline_order`` of schedule ``torch_name`` on ``ranks`` ranks with
    ``microbatches`` microbatches: rank -> actions (``"4F0"``, ``"7I3"``, ...; ``None`` for a
    step the schedule leaves idle), as :func:`tpviz.pytorch.plan.compare` reads them.

    Raises:
        ArgumentError: a class not in :data:`~tpviz.pytorch.plan.TORCH_SCHEDULES`, one this
            torch lacks, or settings the schedule refuses (torch's reason quoted).
    """
    import torch.distributed.pipelining as pp

    name = validate.choice("torch_name", torch_name, tuple(TORCH_SCHEDULES))
    ranks = validate.integer("ranks", ranks, maximum=64)
    microbatches = validate.integer("microbatches", microbatches, maximum=1024)
    if not hasattr(pp, name):
        raise ArgumentError(f"torch_name = {name!r}: this torch has no such schedule.")
    _, per_rank, placement = TORCH_SCHEDULES[name]
    cls, n = _orders_only(getattr(pp, name)), ranks * per_rank
    mine = [0, n - 1] if placement == "v" else list(range(0, n, ranks))  # rank 0's stages
    stages = [_Stage(s, n, ranks) for s in mine]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sched = cls(stages[0] if per_rank == 1 else stages, microbatches,
                        loss_fn=lambda out, target: out)
    except ValueError as e:  # torch's own rule, e.g. DualPipeV's m >= 2p
        raise ArgumentError(f"torch's {name} refuses p = {ranks}, m = {microbatches}: "
                            f"{str(e).splitlines()[0]}") from None
    return {r: [None if a is None else str(a) for a in acts]
            for r, acts in sched.pipeline_order.items()}
