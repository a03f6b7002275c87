"""PyTorch ``torch.distributed`` workers of chapter 1 (the gloo backend, CPU).

The launcher moved to :mod:`tpviz.core.launch` (chapter 13 uses it too); ``launch`` stays
importable from here. The workers below are the chapter's: ``rank_sum``, the failing ones that
show how :func:`launch` reports a crash or a deadlock, and DDP's gradients and buckets.
"""

from __future__ import annotations

import itertools
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from tpviz.core.launch import launch  # noqa: F401  (re-exported: chapter 1 calls it from here)

# ---- workers ------------------------------------------------------------------------------

def rank_sum(rank: int, world: int) -> float:
    """All-reduce each rank's number ``rank + 1``: every worker returns 1 + 2 + ... + world."""
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    return float(t.item())


def fails_on(rank: int, world: int, bad: int = 1) -> int:
    """A worker whose rank ``bad`` raises (to show how :func:`launch` reports it)."""
    if rank == bad:
        raise ValueError(f"rank {rank} was told to fail")
    dist.barrier()  # the others wait for rank `bad`, which never comes
    return rank


def dies_on(rank: int, world: int, bad: int = 1) -> int:
    """A worker whose rank ``bad`` exits at once with code 3, as a crash would."""
    if rank == bad:
        os._exit(3)
    dist.barrier()
    return rank


def hangs_on(rank: int, world: int, bad: int = 1) -> int:
    """A worker whose rank ``bad`` skips the all-reduce the others wait in: a deadlock."""
    if rank != bad:
        dist.all_reduce(torch.ones(1))
    else:
        time.sleep(3600)
    return rank


def model(seed: int = 0, widths: tuple[int, ...] = (8, 32, 4)) -> nn.Sequential:
    """A small MLP (Tanh between Linear layers), initialised from ``seed``."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(widths):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def batch(seed: int = 0, size: int = 32, widths: tuple[int, ...] = (8, 32, 4)):
    """A seeded batch ``(x: [size, widths[0]], y: [size, widths[-1]])``."""
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(size, widths[0], generator=g), torch.randn(size, widths[-1], generator=g)


def full_batch_gradients(seed: int = 0, size: int = 32) -> dict[str, np.ndarray]:
    """The reference: one process, the whole batch, mean squared error."""
    net = model(seed)
    x, y = batch(seed, size)
    nn.functional.mse_loss(net(x), y).backward()
    return {n: p.grad.numpy().copy() for n, p in net.named_parameters()}


def ddp_gradients(rank: int, world: int, seed: int = 0, size: int = 32) -> dict[str, np.ndarray]:
    """DDP: each rank takes its ``size / world`` examples of the same batch; after
    ``backward()`` DDP has all-reduced and averaged the gradients."""
    net = DDP(model(seed))
    x, y = batch(seed, size)
    mine = slice(rank * size // world, (rank + 1) * size // world)
    nn.functional.mse_loss(net(x[mine]), y[mine]).backward()
    return {n: p.grad.numpy().copy() for n, p in net.module.named_parameters()}


def _count_hook(calls: list[int], sizes: list[int]):
    def hook(state, bucket):  # a DDP communication hook: all-reduce one bucket, and count it
        calls[0] += 1
        sizes.append(bucket.buffer().numel() * bucket.buffer().element_size())
        return dist.all_reduce(bucket.buffer().div_(dist.get_world_size()),
                               async_op=True).get_future().then(lambda f: f.value()[0])
    return hook


def all_reduce_calls(rank: int, world: int, caps_mb: tuple[float, ...], layers: int = 6,
                     width: int = 128, steps: int = 2) -> dict[float, list[list[int]]]:
    """For each ``bucket_cap_mb``: per training step, the bytes of each bucket DDP all-reduces
    (one entry per all-reduce call, counted by a communication hook)."""
    out = {}
    for cap in caps_mb:
        net = DDP(model(0, (width,) * (layers + 1)), bucket_cap_mb=cap)
        calls, sizes, per_step = [0], [], []
        net.register_comm_hook(None, _count_hook(calls, sizes))
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        x = torch.randn(4, width, generator=torch.Generator().manual_seed(rank))
        for _ in range(steps):
            sizes.clear()
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
            per_step.append(list(sizes))
        out[cap] = per_step
    return out


def seed_snippet(rank: int, world: int) -> list[float]:
    """The lecture's DDP example with today's API; returns the first row of the weights after
    one step (equal on every rank: DDP keeps the replicas in sync)."""
    # torch.distributed is initialised by launch(): init_process_group("gloo", ...)
    net = nn.Linear(10, 10)
    net = DDP(net)  # broadcasts rank 0's weights, all-reduces the gradients in backward()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    torch.manual_seed(rank)  # each rank its own data
    inp = torch.randn(20, 10)
    exp = torch.randn(20, 10)
    out = net(inp)  # forward pass

    nn.MSELoss()(out, exp).backward()  # backward pass (and the gradient all-reduce)
    opt.step()  # update the parameters
    return net.module.weight[0].tolist()
