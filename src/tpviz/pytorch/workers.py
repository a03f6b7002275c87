"""The chapters' workers as a script, for ``torchrun`` (or any launcher that sets ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``)::

    torchrun --nproc-per-node 4 -m tpviz.pytorch.workers sharding
    torchrun --nproc-per-node 2 -m tpviz.pytorch.workers seed
    torchrun --nproc-per-node 4 -m tpviz.pytorch.workers ddp        # chapter 1's DDP

Each process joins the gloo group from the environment and runs the worker; rank 0 gathers
every rank's result, compares it with one process exactly as the chapter does, prints one line
with the word "equal" and the largest relative error, and every rank exits 0 only when it
matched (1 otherwise, with the difference named).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from tpviz.collectives import torch_run
from tpviz.core.verify import close
from tpviz.errors import CheckFailed
from tpviz.pytorch import check, run, shard


def _ddp(rank: int, world: int):
    return torch_run.ddp_gradients(rank, world, 0, 32)


def _judge_ddp(ranks: list) -> check.Report:
    ref = torch_run.full_batch_gradients(0, 32)
    rep = check.Report()
    for r, grads in enumerate(ranks):
        rep.errors[f"rank {r}"] = close(grads, ref, f"DDP rank {r}'s gradients")
    return rep


WORKERS = {  # name -> (worker(rank, world), judge(results by rank), world it needs or None)
    "ddp": (_ddp, _judge_ddp, None),
    "seed": (run.seed_all, check.judge_seed, 2),
    "schedules": (run.pipelining, check.judge_schedules, 4),
    "sharding": (shard.sharding_all, check.judge_sharding, None),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpviz.pytorch.workers",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("worker", choices=sorted(WORKERS))
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds a collective may wait before the run fails")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        parser.error("RANK and WORLD_SIZE are not set: start this under torchrun, e.g. "
                     f"torchrun --nproc-per-node 4 -m tpviz.pytorch.workers {args.worker}")
    worker, judge, needs = WORKERS[args.worker]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        if needs is not None and world != needs:
            raise CheckFailed(f"{args.worker} runs on {needs} processes; got --nproc-per-node "
                              f"{world}. Use torchrun --nproc-per-node {needs}.")
        mine = worker(rank, world)
        ranks = [None] * world if rank == 0 else None
        dist.gather_object(mine, ranks, dst=0)
        status = 0
        if rank == 0:
            try:
                rep = judge(ranks)
                worst = max(rep.errors.values(), default=0.0)
                print(f"{args.worker}: {world} processes, equal to one process (largest "
                      f"relative error {worst:.1e})", flush=True)
            except CheckFailed as e:
                print(f"{args.worker}: {world} processes, DIFFERENT: {e}", flush=True)
                status = 1
        flag = torch.tensor([status])
        dist.broadcast(flag, src=0)
        return int(flag.item())
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
