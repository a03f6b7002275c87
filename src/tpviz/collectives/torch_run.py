"""PyTorch ``torch.distributed`` on K local processes (the gloo backend, CPU).

:func:`launch` runs a worker function ``worker(rank, world, *args)`` on ``world`` processes that
have joined one gloo process group, and returns each worker's result, in rank order. A worker
must be a function defined at the top level of a module (a child process imports it by name);
the workers below are the chapter's. If a worker raises, :func:`launch` raises
:class:`~tpviz.errors.WorkerError` naming the worker and its exception; if they do not all
finish within ``timeout`` seconds (a rank that skipped a collective leaves the others waiting
for ever), :class:`~tpviz.errors.WorkerTimeout` names the ones still running. Either way every
worker process is stopped before it returns.

The processes start from a *forkserver*: a clean process that imports torch (with
``torch._dynamo``, which DDP needs) and this module once per session, then forks each worker in
milliseconds. The server exits with the Python process that started it.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import queue as queues
import shutil
import tempfile
import time
import traceback
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from tpviz.errors import ArgumentError, ArgumentTypeError, WorkerError, WorkerTimeout

_context = None


def _forkserver():
    global _context
    if _context is None:
        _context = mp.get_context("forkserver")
        # DDP imports torch._dynamo on first use (seconds): import it once, in the server
        _context.set_forkserver_preload([__name__, "torch._dynamo"])
    return _context


def _entry(worker, rank: int, world: int, store: str, args: tuple, out, timeout: float) -> None:
    torch.set_num_threads(1)  # K processes share the cores
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=timeout))
        out.put((rank, "ok", worker(rank, world, *args)))
    except BaseException as e:  # report everything, then let the parent stop the others
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        out.put((rank, "error", f"{type(e).__name__}: {first}", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(worker, world: int = 4, *args, timeout: float = 30.0) -> list:
    """Run ``worker(rank, world, *args)`` on ``world`` gloo processes; their results by rank.

    Raises:
        ArgumentTypeError: ``worker`` is not a function defined at a module's top level.
        ArgumentError: ``world`` < 1 or ``timeout`` <= 0.
        WorkerError: a worker raised (the message names it and its exception) or died.
        WorkerTimeout: not every worker finished within ``timeout`` seconds.
    """
    name = getattr(worker, "__qualname__", "")
    if not callable(worker) or not name or "<" in name or "." in name:
        raise ArgumentTypeError(f"launch(worker={worker!r}): the worker must be a function "
                                "defined at the top level of a module (not a lambda or a "
                                "nested function), so that each process can import it.")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ArgumentError(f"launch(world={world!r}): give the number of processes, >= 1.")
    if not timeout > 0:
        raise ArgumentError(f"launch(timeout={timeout!r}): give seconds > 0.")
    ctx = _forkserver()
    folder = tempfile.mkdtemp(prefix="tpviz-gloo-")
    out = ctx.Queue()
    procs = [ctx.Process(target=_entry, name=f"tpviz worker {r}", daemon=True,
                         args=(worker, r, world, os.path.join(folder, "store"), args, out,
                               timeout)) for r in range(world)]
    results: dict[int, object] = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        while len(results) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                late = [r for r in range(world) if r not in results]
                raise WorkerTimeout(
                    f"{worker.__name__}: worker(s) {late} of {world} did not finish within "
                    f"{timeout:g} s and were stopped. A common cause is a deadlock: a rank "
                    "that skips a collective the others wait in.")
            try:
                rank, status, payload, *more = out.get(timeout=min(left, 0.1))
            except queues.Empty:
                _raise_if_dead(worker, procs, results)
                continue
            if status == "error":  # a peer's crash shows up as an error in the others:
                for _ in range(10):  # give a crashed peer half a second to be reported dead
                    _raise_if_dead(worker, procs, results, f"; worker {rank} then raised "
                                   f"{payload}")
                    time.sleep(0.05)
                raise WorkerError(f"{worker.__name__}: worker {rank} of {world} raised "
                                  f"{payload}\n\nIts traceback:\n{more[0]}")
            results[rank] = payload
    finally:
        for p in procs:
            if p.is_alive() and len(results) == world:
                p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
        out.close()
        out.join_thread()
        shutil.rmtree(folder, ignore_errors=True)
    return [results[r] for r in range(world)]


def _raise_if_dead(worker, procs, results: dict, then: str = "") -> None:
    for r, p in enumerate(procs):
        if r not in results and p.exitcode not in (None, 0):
            raise WorkerError(f"{worker.__name__}: worker {r} of {len(procs)} died (exit code "
                              f"{p.exitcode}) without a result{then}.")


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
