"""Worker functions for the chapter's DTensor build exercises (13.4, 13.7): a learner's
``parallelize_module`` plan run on a 1-D ``init_device_mesh`` of gloo processes at several sizes,
each step's collectives counted by ``CommDebugMode``, and its one-process reference.

Two models: ``"mlp"`` is the Megatron MLP ``Linear(H, F), GELU, Linear(F, H)`` on whole tokens;
``"sp"`` puts a ``LayerNorm(H)`` before it and keeps the tokens split over the ranks outside the
block (sequence parallelism): each rank gets its tokens and returns its tokens' outputs.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from tpviz.pytorch.shard import KINDS as COLLECTIVES
from tpviz.pytorch.shard import counts

KINDS = ("mlp", "sp")


class Sent(TorchDispatchMode):
    """Beside ``CommDebugMode``: each collective this rank issues, as ``(kind, bytes of its
    input)``: what this rank sends into it (an all-gather's own part, a reduce-scatter's whole
    partial tensor, an all-reduce's tensor)."""

    def __init__(self):
        super().__init__()
        self.sent: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = COLLECTIVES.get(func.__name__.split(".")[0])
        if kind is not None:
            t = args[0][0] if isinstance(args[0], list | tuple) else args[0]
            self.sent.append((kind, t.numel() * t.element_size()))
        return func(*args, **(kwargs or {}))


def model(kind: str, hidden: int, ffn: int, seed: int = 0) -> nn.Sequential:
    """The block of ``kind``, its layers named "0", "1", … as ``parallelize_module`` sees them."""
    torch.manual_seed(seed)
    layers = [nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden)]
    if kind == "sp":
        norm = nn.LayerNorm(hidden)
        with torch.no_grad():  # not the identity, so that a missing reduction shows
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
        layers.insert(0, norm)
    return nn.Sequential(*layers)


def batch(hidden: int, tokens: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(1, tokens, hidden, generator=g)


def reference(kind: str, hidden: int, ffn: int, tokens: int, seed: int = 0) -> dict:
    """One process: the output, the input's gradient and the weights' gradients of
    ``sum(out ** 2) / 2``."""
    net = model(kind, hidden, ffn, seed)
    x = batch(hidden, tokens, seed).requires_grad_(True)
    out = net(x)
    out.square().sum().div(2).backward()
    return {"out": out.detach().numpy(), "x_grad": x.grad.numpy(),
            "grads": {n: p.grad.numpy() for n, p in net.named_parameters()}}


def _whole(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def run(rank: int, world: int, plan: dict, kind: str, sizes: tuple, seed: int = 0,
        barred: tuple = ()) -> list:
    """Per size ``(hidden, ffn, tokens)``: this rank's output and input gradient (its tokens
    for ``"sp"``, all of them for ``"mlp"``), the weights' gradients whole, the collectives
    of the forward and of the backward, and for ``"sp"`` the LayerNorm's layouts
    (:func:`_norm`). ``barred``: dotted names whose code may not run
    (:func:`tpviz.core.unavailable.unavailable`), e.g. torch's ``ColwiseParallel`` while a
    learner's own column-wise style splits, runs and differentiates its layer."""
    from tpviz.core.unavailable import Unavailable, unavailable

    with unavailable(barred) as called:
        out = _run(world, plan, kind, sizes, seed, rank)
    if called:  # even if the learner's code caught the exception
        raise Unavailable(called[0])
    return out


def _run(world: int, plan: dict, kind: str, sizes: tuple, seed: int, rank: int) -> list:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module

    from tpviz.pytorch.ship import unpack_plan

    mesh = init_device_mesh("cpu", (world,))
    plan = unpack_plan(plan)  # styles written in a notebook come as their code
    out = []
    for hidden, ffn, tokens in sizes:
        net = parallelize_module(model(kind, hidden, ffn, seed), mesh, plan)
        x = batch(hidden, tokens, seed)
        if kind == "sp":
            size = tokens // world
            x = x[:, rank * size:(rank + 1) * size]
        x = x.clone().requires_grad_(True)
        seen = []  # layer "0"'s output as layer "1" receives it (after the style's own hooks)
        if kind == "sp":
            net.get_submodule("0").register_forward_hook(
                lambda m, i, o, seen=seen: seen.append(_layout(o)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with CommDebugMode() as fwd, Sent() as fwd_sent:
                y = net(x)
            with CommDebugMode() as bwd, Sent() as bwd_sent:
                y.square().sum().div(2).backward()
        # a plan may hand back a DTensor (use_local_output=False): this rank's tokens, whole
        y = y.to_local() if kind == "sp" and hasattr(y, "to_local") else _whole(y)
        norm = _norm(net, seen) if kind == "sp" else {}
        out.append({"out": y.detach().numpy(), "x_grad": x.grad.numpy(),
                    "grads": {n: _whole(p.grad).detach().numpy()
                              for n, p in net.named_parameters()},
                    "forward": counts(fwd), "backward": counts(bwd), "norm": norm,
                    "sent": {"forward": sorted(fwd_sent.sent),
                             "backward": sorted(bwd_sent.sent)}})
    return out


def _layout(t) -> tuple:
    """``("DTensor", its placements, its local shape)`` or ``("tensor", None, its shape)``."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        return ("DTensor", str(tuple(t.placements)), tuple(t.to_local().shape))
    return ("tensor", None, tuple(getattr(t, "shape", ())))


def _norm(net, seen: list) -> dict:
    """The LayerNorm's (layer "0"'s): its output's layout, its parameters' and their gradients'
    layouts after the backward, and the collectives that make those gradients whole."""
    from torch.distributed.tensor.debug import CommDebugMode

    params = dict(net.get_submodule("0").named_parameters())
    found = {"out": seen[0] if seen else None,
             "params": {k: _layout(p)[1] for k, p in params.items()},
             "grads": {k: _layout(p.grad)[1] for k, p in params.items()}}
    with CommDebugMode() as whole, Sent() as sent:
        for p in params.values():
            _whole(p.grad)
    return {**found, "reduce": counts(whole), "sent": sorted(sent.sent)}


def join(kind: str, ranks: list, k: int) -> dict:
    """Size ``k``'s results as one process would hold them: the tokens of ``"sp"`` put back
    together along the sequence."""
    first = ranks[0][k]
    if kind != "sp":
        return first
    return {**first, "out": np.concatenate([r[k]["out"] for r in ranks], axis=1),
            "x_grad": np.concatenate([r[k]["x_grad"] for r in ranks], axis=1)}
