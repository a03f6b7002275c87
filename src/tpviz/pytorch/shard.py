"""Worker functions for sharded training: FSDP2 (``fully_shard``) and tensor parallelism with
DTensor (``parallelize_module``), each on a 1-D ``init_device_mesh`` of gloo processes.

Collectives are counted by torch's own ``CommDebugMode`` (it sees every c10d and functional
collective the step issues), not by a counter that repeats the rule.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

# FSDP2 and DTensor are imported inside the workers: the launching process (a notebook's
# kernel) then imports only torch, and the process server imports them once (plan.PRELOAD)

# what CommDebugMode calls each collective -> the Collective kind of tpviz.core.collectives
KINDS = {"_allgather_base_": "all-gather", "allgather_": "all-gather",
         "all_gather_into_tensor": "all-gather", "_reduce_scatter_base_": "reduce-scatter",
         "reduce_scatter_": "reduce-scatter", "reduce_scatter_tensor": "reduce-scatter",
         "allreduce_": "all-reduce", "all_reduce": "all-reduce"}


def counts(mode) -> dict[str, int]:
    """CommDebugMode's counts by tpviz's names ('all-gather', 'reduce-scatter', 'all-reduce')."""
    out: dict[str, int] = {}
    for op, n in mode.get_comm_counts().items():
        kind = KINDS.get(str(op).split(".")[-1].removesuffix(".default"), str(op))
        out[kind] = out.get(kind, 0) + n
    return out


# ---- FSDP2 ---------------------------------------------------------------------------------

#: the FSDP example's parameters: float64 (8 bytes), so that the bytes a rank holds, 8 Ψ / N,
#: are not the parameter count Ψ itself (which 4-byte parameters on 4 ranks would give)
FSDP_DTYPE = torch.float64


def fsdp_model(seed: int = 0, units: int = 3, width: int = 16) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*(nn.Linear(width, width) for _ in range(units))).to(FSDP_DTYPE)


def fsdp_batch(seed: int = 0, size: int = 8, width: int = 16):
    g = torch.Generator().manual_seed(seed + 1)
    return (torch.randn(size, width, generator=g, dtype=FSDP_DTYPE),
            torch.randn(size, width, generator=g, dtype=FSDP_DTYPE))


def fsdp_reference(seed: int = 0, units: int = 3) -> dict:
    """One process, the whole batch: the loss and the gradients (and the parameter count and
    the bytes of one parameter)."""
    net = fsdp_model(seed, units)
    x, y = fsdp_batch(seed)
    loss = nn.functional.mse_loss(net(x), y)
    loss.backward()
    return {"loss": loss.item(), "params": sum(p.numel() for p in net.parameters()),
            "param_bytes": next(net.parameters()).element_size(),
            "grads": {n: p.grad.numpy() for n, p in net.named_parameters()}}


def fsdp(rank: int, world: int, reshard: tuple = (True, False), seed: int = 0,
         units: int = 3) -> dict:
    """``fully_shard`` each Linear, then the root, over all ranks; every rank takes its
    ``size / world`` examples. Per ``reshard_after_forward``: the bytes of this rank's local
    parameter shards, the collectives of one step, the loss and the full gradients (gathered
    from the shards)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh("cpu", (world,))
    out = {}
    for raf in reshard:
        net = fsdp_model(seed, units)
        for layer in net:
            fully_shard(layer, mesh=mesh, reshard_after_forward=raf)
        fully_shard(net, mesh=mesh, reshard_after_forward=raf)
        local = sum(p.to_local().numel() * p.element_size() for p in net.parameters())
        x, y = fsdp_batch(seed)
        mine = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        with CommDebugMode() as mode, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            loss = nn.functional.mse_loss(net(x[mine]), y[mine])
            loss.backward()
        found = counts(mode)
        grads = {n: p.grad.full_tensor().numpy() for n, p in net.named_parameters()}
        out[raf] = {"local_bytes": local, "collectives": found, "grads": grads,
                    "loss": loss.item(), "placements": str(next(net.parameters()).placements)}
    return out


# ---- tensor parallelism with DTensor -------------------------------------------------------

def tp_model(seed: int = 0, hidden: int = 8, ffn: int = 32) -> nn.Sequential:
    """The Megatron MLP: ``up`` (hidden -> ffn), GELU, ``down`` (ffn -> hidden)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))


def tp_batch(seed: int = 0, tokens: int = 8, hidden: int = 8):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(1, tokens, hidden, generator=g)


def tp_reference(seed: int = 0) -> dict:
    """One process: the MLP's output, the input's gradient and the weights' gradients of
    ``sum(out ** 2) / 2``."""
    net = tp_model(seed)
    x = tp_batch(seed).requires_grad_(True)
    out = net(x)
    out.square().sum().div(2).backward()
    return {"out": out.detach().numpy(), "x_grad": x.grad.numpy(),
            "grads": {n: p.grad.numpy() for n, p in net.named_parameters()}}


def megatron_plan() -> dict:
    """Column-parallel ``up``, row-parallel ``down``: Y = GELU(X W_1) W_2 (chapter 4)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return _marked({"0": ColwiseParallel(), "2": RowwiseParallel()}, "megatron_plan")


def sequence_parallel_plan() -> dict:
    """The sequence-parallel variant: tokens sharded outside the MLP (``Shard(1)``); the
    entry all-gathers them, the exit reduce-scatters instead of all-reducing."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return _marked({"0": ColwiseParallel(input_layouts=Shard(1)),
                    "2": RowwiseParallel(output_layouts=Shard(1))}, "sequence_parallel_plan")


def _marked(plan: dict, name: str) -> dict:
    """The book's plan, each style marked as such: the exercises' checkers (13.4, 13.7) refuse a
    plan made of them, as the learner's own."""
    for style in plan.values():
        style._tpviz_book = f"tpviz.pytorch.shard.{name}"
    return plan


def tensor_parallel(rank: int, world: int, plans: dict, seed: int = 0) -> dict:
    """Per named plan (``parallelize_module``'s dict: layer name -> ParallelStyle): the
    output, the gradients (whole, gathered) and the collectives CommDebugMode counts in the
    forward and in the backward. A plan whose first style expects ``Shard(1)`` inputs gets
    this rank's tokens and its output's shards are gathered back."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    out = {}
    for name, plan in plans.items():
        net = parallelize_module(tp_model(seed), mesh, plan)
        x = tp_batch(seed)
        sharded_in = _sharded_input(plan)
        if sharded_in:
            size = x.shape[1] // world
            x = x[:, rank * size:(rank + 1) * size]
        x = x.clone().requires_grad_(True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with CommDebugMode() as fwd:
                y = net(x)
            with CommDebugMode() as bwd:
                y.square().sum().div(2).backward()
        whole = lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t  # noqa: E731
        out[name] = {"out": whole(y).detach().numpy(), "x_grad": x.grad.numpy(),
                     "grads": {n: whole(p.grad).numpy() for n, p in net.named_parameters()},
                     "forward": counts(fwd), "backward": counts(bwd), "sharded_in": sharded_in}
    return out


def _sharded_input(plan: dict) -> bool:
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import SequenceParallel

    first = plan.get("0")
    layouts = getattr(first, "input_layouts", None)
    return any(isinstance(p, Shard) for p in (layouts or ())) or isinstance(first,
                                                                            SequenceParallel)


def gather_tokens(parts: list[np.ndarray]) -> np.ndarray:
    """Concatenate per-rank token shards (axis 1) back into the whole sequence."""
    return np.concatenate(parts, axis=1)


def sharding_all(rank: int, world: int, plans: dict | None = None) -> dict:
    """FSDP2 (both ``reshard_after_forward``) and the DTensor plans in one launch."""
    plans = plans or {"megatron": megatron_plan(), "sequence parallel": sequence_parallel_plan()}
    return {"fsdp": fsdp(rank, world), "tp": tensor_parallel(rank, world, plans)}
