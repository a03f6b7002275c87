"""Memory and communication of ZeRO stages 0-3 per device (plan level: numbers, no devices).

With mixed-precision Adam each parameter costs 2 bytes of bf16/fp16 weights, 2 of gradients and
12 of optimizer state (fp32 master weights, momentum and variance): 16 bytes on every device in
plain data parallelism (stage 0). Stage 1 partitions the optimizer state over the N devices,
stage 2 also the gradients, stage 3 also the parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpviz.core import validate
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import Amount, Devices, KeywordsOf, OneOf, Positive, Rate
from tpviz.errors import ZeroError

STAGES = (0, 1, 2, 3)
CATEGORIES = ("params", "grads", "optimizer")
# what each stage partitions over the N devices (the rest stays whole on every device)
PARTITIONED = {0: (), 1: ("optimizer",), 2: ("grads", "optimizer"), 3: CATEGORIES}
# bytes per parameter of (params, grads, optimizer state)
PRECISIONS = {"mixed bf16 + fp32 Adam (2 + 2 + 12)": (2, 2, 12),
              "fp32 Adam (4 + 4 + 8)": (4, 4, 8), "bf16 Adam states (2 + 2 + 4)": (2, 2, 4)}
# parameter counts of well-known models (GPT-2 small and XL; GPT-3 sizes; the ZeRO paper's 7.5B)
MODELS = {"GPT-2 (124M)": 124e6, "GPT-2 XL (1.5B)": 1.5e9, "7.5B (ZeRO paper)": 7.5e9,
          "GPT-3 13B": 13e9, "GPT-3 175B": 175e9}


@dataclass(frozen=True)
class Memory:
    """Bytes per device, by category."""

    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def _validate(params, devices, stage, **sizes) -> tuple:
    """(params, devices, stage, *sizes) as plain numbers; ZeroError for values that make no
    sense (a stage outside 0-3 = STAGES, a size that is not positive)."""
    stage = validate.choice("stage", stage, STAGES, error=ZeroError)
    devices = validate.integer("devices", devices, error=ZeroError)
    numbers = [validate.number(name, value, positive=True, error=ZeroError)
               for name, value in {"params": params, **sizes}.items()]
    return (numbers[0], devices, stage, *numbers[1:])


def memory(params: Positive, devices: Devices, stage: OneOf(STAGES), *, param_bytes: float = 2,
           grad_bytes: float = 2, optimizer_bytes: float = 12) -> Memory:
    """Per-device bytes of parameters, gradients and optimizer state at a ZeRO stage.

    Stage 0: (2 + 2 + 12) Ψ; stage 1: 2Ψ + 2Ψ + 12Ψ/N; stage 2: 2Ψ + (2 + 12)Ψ/N;
    stage 3: (2 + 2 + 12)Ψ/N (with the default byte counts).

    Raises:
        ZeroError: a stage outside 0-3 or a non-positive size.
    """
    params, devices, stage, *sizes = _validate(params, devices, stage, param_bytes=param_bytes,
                                               grad_bytes=grad_bytes,
                                               optimizer_bytes=optimizer_bytes)
    per = dict(zip(CATEGORIES, sizes, strict=True))
    return Memory(**{c: params * per[c] / (devices if c in PARTITIONED[stage] else 1)
                     for c in CATEGORIES})


def collectives(params: Positive, devices: Devices, stage: OneOf(STAGES), *, param_bytes: float = 2
                ) -> Collectives:
    """The collectives of one training step (gradients as wide as the parameters).

    Stage 0: an all-reduce of the gradients. Stages 1-2: a reduce-scatter of the gradients and
    an all-gather of the updated parameters. Stage 3: an all-gather of the parameters for the
    forward pass and another for the backward pass, and a reduce-scatter of the gradients.
    """
    params, devices, stage, param_bytes = _validate(params, devices, stage,
                                                    param_bytes=param_bytes)
    whole, n = params * param_bytes, devices
    gather = Collective("all-gather", whole, n, what="parameters")
    scatter = Collective("reduce-scatter", whole / n, n, what="gradients")
    if stage == 3:
        return fsdp_collectives(whole, n)
    return Collectives({0: [Collective("all-reduce", whole, n, what="gradients")],
                        1: [scatter, gather], 2: [scatter, gather]}[stage])


def fsdp_collectives(nbytes: Amount, devices: Devices, reshard_after_forward: bool = True
                     ) -> Collectives:
    """FSDP's (ZeRO stage 3's) collectives of one training step for ``nbytes`` of parameters
    sharded over ``devices``: the one FSDP schedule, named as PyTorch FSDP2 names it.

    ``reshard_after_forward=True`` (ZeRO-3): all-gather the parameters for the forward pass,
    free them, all-gather them again for the backward pass, reduce-scatter the gradients:
    3 (N-1)/N · nbytes sent per device (12·D·F per bf16 MLP layer of 2·D·F weights).
    ``False``: gather once and keep the weights until the backward pass is done (more memory,
    one gather fewer): 2 (N-1)/N · nbytes (8·D·F), what the 2D mesh of chapter 6 does.
    """
    n = devices
    gather = Collective("all-gather", nbytes, n, what="parameters")
    scatter = Collective("reduce-scatter", nbytes / n, n, what="gradients")
    return Collectives([gather, gather, scatter] if reshard_after_forward else [gather, scatter])


def communication(params: Positive, devices: Devices, stage: OneOf(STAGES), *,
                  param_bytes: float = 2) -> Amount:
    """Bytes each device sends per training step with ring collectives: 2 (N-1)/N Ψ bytes at
    stages 0-2 (an all-reduce is a reduce-scatter and an all-gather), 3 (N-1)/N Ψ at stage 3."""
    return collectives(params, devices, stage, param_bytes=param_bytes).sent_bytes()


def smallest_devices(params: Positive, stage: OneOf(STAGES), capacity: Rate,
                     **sizes: KeywordsOf(memory)) -> int | None:
    """The fewest devices on which the model's training state fits in ``capacity`` bytes each
    (None if no device count is enough: stages 0-2 keep some state whole on every device)."""
    whole = memory(params, 1, stage, **sizes)
    stage = validate.choice("stage", stage, STAGES, error=ZeroError)
    capacity = validate.number("capacity", capacity, positive=True, error=ZeroError)
    fixed = sum(getattr(whole, c) for c in CATEGORIES if c not in PARTITIONED[stage])
    if fixed >= capacity:
        return None
    split = whole.total - fixed
    return max(1, math.ceil(split / (capacity - fixed) - 1e-12))
