"""The PyTorch tutorial's model parallelism on 2 gloo processes (Li, "Single-Machine Model
Parallel Best Practices"), with an MLP where the tutorial has ResNet-50.

- ``ModelParallelResNet50`` puts the first half of the model on ``cuda:0`` and the second on
  ``cuda:1``: here rank 0 and rank 1, the activation sent forward and its gradient sent back.
  While one works, the other waits.
- ``PipelineParallelResNet50(split_size)`` cuts each batch into chunks of ``split_size``
  examples, so rank 0 runs chunk i + 1 while rank 1 runs chunk i (GPipe with m = batch /
  split_size microbatches on p = 2 stages). ``split_size = batch`` is ModelParallelResNet50.

:func:`step` runs one training step of either and records every op's start and end;
:func:`sweep` times the whole model on one process against the split one at several
``split_size`` values, repetition after repetition (each with its own seed), as the tutorial
does with ``timeit.repeat``.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from tpviz.pytorch.plan import bubble


def mlp(seed: int = 0, width: int = 384, depth: int = 2) -> nn.Sequential:
    """``2 * depth`` pieces of Linear + Tanh; rank 0 holds the first ``2 * depth`` modules."""
    torch.manual_seed(seed)
    return nn.Sequential(*(m for _ in range(2 * depth) for m in (nn.Linear(width, width),
                                                                    nn.Tanh())))


def batch(seed: int = 0, size: int = 64, width: int = 384):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(size, width, generator=g), torch.randn(size, width, generator=g)


def half(net: nn.Sequential, rank: int) -> nn.Sequential:
    """Rank 0's or rank 1's half (a slice of nn.Sequential keeps the layers' names)."""
    cut = len(net) // 2
    return net[:cut] if rank == 0 else net[cut:]


def step(rank: int, part: nn.Module, x, y, split_size: int) -> tuple[list[tuple], float | None]:
    """One training step of the split model, the batch in chunks of ``split_size``: every
    forward, then every backward, chunk by chunk (GPipe's order). Returns each op as
    ``(kind, chunk, start, end)`` (``time.perf_counter``: one clock for both processes) and,
    on rank 1, the loss (the mean over the whole batch, as one process computes it)."""
    chunks, width = x.shape[0] // split_size, x.shape[1]
    spans, saved, outs = [], [], []
    for i in range(chunks):
        if rank == 0:
            t0 = time.perf_counter()
            h = part(x[i * split_size:(i + 1) * split_size])  # h: f32[split_size, width]
            spans.append(("F", i, t0, time.perf_counter()))
            dist.send(h.detach(), dst=1)
        else:
            h = torch.empty(split_size, width)
            dist.recv(h, src=0)
            h.requires_grad_(True)
            t0 = time.perf_counter()
            outs.append(part(h))
            spans.append(("F", i, t0, time.perf_counter()))
        saved.append(h)
    loss = None
    for i in range(chunks):
        if rank == 1:
            t0 = time.perf_counter()
            target = y[i * split_size:(i + 1) * split_size]
            piece = nn.functional.mse_loss(outs[i], target, reduction="sum") / y.numel()
            piece.backward()
            spans.append(("B", i, t0, time.perf_counter()))
            loss = piece.item() + (loss or 0.0)
            dist.send(saved[i].grad, dst=0)
        else:
            grad = torch.empty_like(saved[i])
            dist.recv(grad, src=1)
            t0 = time.perf_counter()
            saved[i].backward(grad)
            spans.append(("B", i, t0, time.perf_counter()))
    return spans, loss


def _error(got: dict, want: dict) -> float:
    """The largest relative error of any tensor: max |got - want| / max |want|."""
    return max(float((got[k] - w).abs().max() / w.abs().max()) for k, w in want.items())


def sweep(rank: int, world: int, sizes: tuple = (64, 32, 16, 8, 4), repeats: int = 5,
          size: int = 64, width: int = 1024, depth: int = 1) -> dict:
    """Time one training step (forward and backward) of the whole model on rank 0 alone and of
    the split model at each ``split_size`` in ``sizes``, ``repeats`` times, each repetition with
    its own seed (0, 1, ...) after one repetition that is not timed (first calls are slow).
    Settings alternate inside a repetition, each repetition starting one setting later, so a
    load that comes and goes touches them all and no setting always runs first.

    Returns, on each rank: ``wall[setting]`` (seconds from leaving a barrier to the end of this
    rank's own work, one per repetition; on rank 0 that is the step, its last backward being
    the step's last op; the setting ``"one process"`` or a split size), ``cpu[setting]`` (this
    process's CPU seconds over the same span: compute, and sends and receives, which gloo polls
    for a while before it sleeps), ``spans[size]`` (every op's recorded start and end, for the
    measured bubble) and ``error[size]`` (the untimed repetition's largest relative gradient
    error against one process, on this rank's half). The barrier that closes a step is not
    timed: waking the processes up from it is no part of the step."""
    wall: dict = {}
    cpu: dict = {}
    idle: dict = {}
    error: dict = {}
    for rep in range(repeats + 1):
        seed = rep - 1 if rep else 0
        net = mlp(seed, width, depth)
        x, y = batch(seed, size, width)
        part = half(net, rank)
        settings = ("one process", *sizes)
        turn = rep % len(settings)  # repetition 0 (untimed) runs "one process" first
        for setting in settings[turn:] + settings[:turn]:
            for p in net.parameters():
                p.grad = None
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            if setting == "one process":
                if rank == 0:
                    nn.functional.mse_loss(net(x), y).backward()
            else:
                spans, _ = step(rank, part, x, y, setting)
            t1, c1 = time.perf_counter(), time.process_time()
            dist.barrier()
            if rep == 0:  # untimed: check the values instead
                if setting == "one process":
                    if rank == 1:
                        nn.functional.mse_loss(net(x), y).backward()
                    want = {n: p.grad.clone() for n, p in part.named_parameters()}
                else:
                    error[setting] = _error({n: p.grad for n, p in part.named_parameters()},
                                            want)
                continue
            wall.setdefault(setting, []).append(t1 - t0)
            cpu.setdefault(setting, []).append(c1 - c0)
            if setting != "one process":
                idle.setdefault(setting, []).append(spans)
    return {"wall": wall, "cpu": cpu, "spans": idle, "error": error}


def summary(ranks: list[dict]) -> dict:
    """Per setting: the wall times (rank 0's), the CPU seconds of both processes together, and
    for the split ones each repetition's spans (both ranks), measured bubble, and the gradient
    error."""
    r0, r1 = ranks
    out = {}
    for setting, times in r0["wall"].items():
        both = np.add(r0["cpu"][setting], r1["cpu"][setting])
        row = {"wall": np.array(times), "cpu": both}
        if setting != "one process":
            row["spans"] = [[a, b] for a, b in zip(r0["spans"][setting], r1["spans"][setting],
                                                    strict=True)]
            row["bubble"] = np.array([bubble(s) for s in row["spans"]])
            row["error"] = max(r0["error"][setting], r1["error"][setting])
        out[setting] = row
    return out
