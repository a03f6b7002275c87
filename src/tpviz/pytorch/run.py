"""Worker functions on gloo processes (run by :func:`tpviz.core.launch.launch`, or by torchrun
through :mod:`tpviz.pytorch.workers`), each with its one-process reference.

- :func:`toy_split`: the seed lecture's ``ToyModel`` split over 2 processes (naive model
  parallelism: the activation sent forward, its gradient sent back);
- :func:`seed_all`: the ToyModel and the PyTorch tutorial's ``split_size`` pipeline
  (:mod:`tpviz.pytorch.split`) in one launch of 2 processes;
- :func:`pipelining`: ``torch.distributed.pipelining`` with each schedule on the same MLP: the
  loss, every gradient, torch's ``pipeline_order`` and the order the stages really ran.

Results are plain numbers and NumPy arrays (they cross process boundaries by pickle).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

WIDTH, LAYERS, BATCH = 16, 8, 16  # the pipelining MLP: 8 Linear + Tanh pieces


# ---- the seed's ToyModel, split over 2 processes ------------------------------------------

def toy_model(seed: int = 0) -> nn.Sequential:
    """The lecture's ``ToyModel``: ``net1 = Linear(10, 10)``, ReLU, ``net2 = Linear(10, 5)``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5))


def toy_batch(seed: int = 0, size: int = 20):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(size, 10, generator=g), torch.randn(size, 5, generator=g)


def toy_reference(seed: int = 0) -> dict[str, np.ndarray]:
    """One process: the output, the loss and every gradient of the whole ``ToyModel``."""
    net = toy_model(seed)
    x, y = toy_batch(seed)
    out = net(x)
    loss = nn.functional.mse_loss(out, y)
    loss.backward()
    return {"out": out.detach().numpy(), "loss": loss.item(),
            **{n: p.grad.numpy() for n, p in net.named_parameters()}}


def toy_split(rank: int, world: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Rank 0 holds ``net1`` + ReLU (the seed's ``cuda:0``), rank 1 ``net2`` (``cuda:1``).
    Forward: rank 0 sends its activation [20, 10]; backward: rank 1 sends its gradient back."""
    net = toy_model(seed)  # both build the whole model from the seed, then keep their half
    x, y = toy_batch(seed)
    if rank == 0:
        h = net[1](net[0](x))  # h: f32[20, 10]
        dist.send(h.detach(), dst=1)
        grad = torch.empty_like(h)
        dist.recv(grad, src=1)
        h.backward(grad)
        return {n: p.grad.numpy() for n, p in net.named_parameters() if n.startswith("0.")}
    h = torch.empty(x.shape[0], 10)
    dist.recv(h, src=0)
    h.requires_grad_(True)
    out = net[2](h)
    loss = nn.functional.mse_loss(out, y)
    loss.backward()
    dist.send(h.grad, dst=0)
    return {"out": out.detach().numpy(), "loss": loss.item(),
            **{n: p.grad.numpy() for n, p in net.named_parameters() if n.startswith("2.")}}


# ---- torch.distributed.pipelining ---------------------------------------------------------

def mlp(seed: int = 0, layers: int = LAYERS, width: int = WIDTH) -> nn.Sequential:
    """``layers`` pieces of Linear + Tanh (a piece is one pipeline stage at most)."""
    torch.manual_seed(seed)
    return nn.Sequential(*(nn.Sequential(nn.Linear(width, width), nn.Tanh())
                           for _ in range(layers)))


def mlp_batch(seed: int = 0, size: int = BATCH, width: int = WIDTH):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(size, width, generator=g), torch.randn(size, width, generator=g)


def mlp_reference(seed: int = 0, layers: int = LAYERS) -> dict:
    """One process, the whole batch: the loss and every gradient (names as in :func:`mlp`)."""
    net = mlp(seed, layers)
    x, y = mlp_batch(seed)
    loss = nn.functional.mse_loss(net(x), y)
    loss.backward()
    return {"loss": loss.item(), "grads": {n: p.grad.numpy() for n, p in net.named_parameters()}}


def stage_indices(rank: int, world: int, per_rank: int, placement: str) -> list[int]:
    """The stages a rank holds: ``loop`` (stage s on rank s mod p) or ``v`` (rank r holds r
    and 2p - 1 - r, the V of ZBV and DualPipeV)."""
    if placement == "v":
        return [rank, 2 * world - 1 - rank]
    return [rank + k * world for k in range(per_rank)]


def pipelining(rank: int, world: int, schedules: tuple | None = None, microbatches: int = 8,
               seed: int = 0, bounds: tuple | None = None) -> dict:
    """Run one training step of the MLP under each ``(class name, stages per rank, placement)``
    in ``schedules``. ``bounds`` (optional): the layers of each stage, ``((start, stop), ...)``;
    by default the layers are spread evenly. Per schedule: the loss (last rank), this rank's
    gradients (names as in :func:`mlp`), torch's ``pipeline_order`` (strings) and the ops the
    stages ran, in order. ``schedules=None``: every schedule this torch has."""
    import torch.distributed.pipelining as pp  # here: the launching process need not import it

    from tpviz.pytorch.plan import runnable_schedules
    if schedules is None:
        schedules = runnable_schedules(lambda name: hasattr(pp, name))[0]
    out = {}
    for name, per_rank, placement in schedules:
        net = mlp(seed)
        x, y = mlp_batch(seed)
        n = world * per_rank
        cuts = bounds or tuple((s * LAYERS // n, (s + 1) * LAYERS // n) for s in range(n))
        stages, ran = [], []
        for s in stage_indices(rank, world, per_rank, placement):
            a, b = cuts[s]
            stage = pp.PipelineStage(net[a:b], s, n, torch.device("cpu"))
            _record(stage, s, ran)
            stages.append(stage)
        cls = getattr(pp, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            sched = cls(stages[0] if per_rank == 1 and placement == "loop" else stages,
                        microbatches, loss_fn=nn.functional.mse_loss)
            losses: list = []
            holds_first = 0 in (st.stage_index for st in stages)
            holds_last = n - 1 in (st.stage_index for st in stages)
            sched.step(*((x,) if holds_first else ()), target=y if holds_last else None,
                       losses=losses)
        order = {r: [None if a is None else str(a) for a in acts]
                 for r, acts in (sched.pipeline_order or {}).items()}
        # a slice of nn.Sequential keeps the layers' names: "3.0.weight" is layer 3's
        grads = {pname: p.grad.numpy().copy() for st in stages
                 for pname, p in st.submod.named_parameters()}
        loss = float(torch.stack(losses).detach().mean()) if losses else None
        out[name] = {"loss": loss, "grads": grads, "order": order, "ran": ran}
    return out


def _record(stage, index: int, ran: list) -> None:
    """Log every F, B, I and W the stage really runs, as torch's action strings."""
    fwd, bwd, wgt = stage.forward_one_chunk, stage.backward_one_chunk, \
        stage.backward_weight_one_chunk

    def forward(chunk, *args, **kwargs):
        ran.append(f"{index}F{chunk}")
        return fwd(chunk, *args, **kwargs)

    def backward(chunk, *args, **kwargs):
        ran.append(f"{index}{'B' if kwargs.get('full_backward', True) else 'I'}{chunk}")
        return bwd(chunk, *args, **kwargs)

    def weight(chunk, *args, **kwargs):
        ran.append(f"{index}W{chunk}")
        return wgt(chunk, *args, **kwargs)

    stage.forward_one_chunk, stage.backward_one_chunk = forward, backward
    stage.backward_weight_one_chunk = weight


def seed_all(rank: int, world: int, sweep: dict | None = None) -> dict:
    """The seed's runs in one launch of 2 processes (process start-up is the cost): the
    ToyModel, and the tutorial's ``split_size`` pipeline timed at several ``split_size``
    (:func:`tpviz.pytorch.split.sweep`; ``sweep``: its keyword arguments, None: its defaults)."""
    from tpviz.pytorch import split

    return {"toy": toy_split(rank, world), "sweep": split.sweep(rank, world, **(sweep or {}))}
