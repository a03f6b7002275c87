"""Real ZeRO training steps in JAX: a small MLP trained with Adam on a 1D "data" mesh.

All parameters live in one flat float32 vector (padded with zeros to a multiple of the devices),
so "partition over N devices" is simply "device d holds the d-th 1/N of the vector". The state is
``(params, grads, m, v)``; each stage shards a different part of it:

======  ==========  ==========  ===========  ==================================================
stage   params      grads       Adam m, v    communication per step
======  ==========  ==========  ===========  ==================================================
0       whole       whole       whole        all-reduce of the gradients
1       whole       whole       1/N          reduce-scatter gradients, all-gather parameters
2       whole       1/N         1/N          reduce-scatter gradients, all-gather parameters
3       1/N         1/N         1/N          all-gather parameters (forward, and again in the
                                             backward), reduce-scatter gradients
======  ==========  ==========  ===========  ==================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.core import compiled, verify
from tpviz.core.collectives import Collectives
from tpviz.errors import ZeroError
from tpviz.zero.plan import PARTITIONED, STAGES, collectives, communication, memory

AXIS = "data"
LR, B1, B2, EPS = 1e-2, 0.9, 0.999, 1e-8


@dataclass(frozen=True)
class Model:
    """An MLP with layer widths ``sizes``, its parameters flattened into one vector."""

    sizes: tuple[int, ...]
    devices: int

    @property
    def count(self) -> int:
        """Ψ: parameters of the model."""
        return sum(a * b + b for a, b in zip(self.sizes[:-1], self.sizes[1:], strict=True))

    @property
    def padded(self) -> int:
        """Ψ rounded up to a multiple of the devices (the padding stays zero)."""
        return math.ceil(self.count / self.devices) * self.devices

    def unflatten(self, flat):
        layers, at = [], 0
        for a, b in zip(self.sizes[:-1], self.sizes[1:], strict=True):
            w = flat[at:at + a * b].reshape(a, b)
            layers.append((w, flat[at + a * b:at + a * b + b]))
            at += a * b + b
        return layers

    def init(self, seed: int = 0) -> np.ndarray:
        rng = np.random.default_rng(seed)
        parts = []
        for a, b in zip(self.sizes[:-1], self.sizes[1:], strict=True):
            parts += [rng.standard_normal(a * b) / np.sqrt(a), np.zeros(b)]
        flat = np.concatenate([*parts, np.zeros(self.padded - self.count)])
        return flat.astype(np.float32)

    def loss(self, flat, x, target):
        h = x
        layers = self.unflatten(flat)
        for i, (w, b) in enumerate(layers):
            h = h @ w + b
            if i < len(layers) - 1:
                h = jnp.tanh(h)
        return jnp.mean((h - target) ** 2)


def adam(p, g, m, v, t):
    """One Adam update (learning rate LR, betas B1 and B2) of parameters p with gradient g."""
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    m_hat, v_hat = m / (1 - B1**t), v / (1 - B2**t)
    return p - LR * m_hat / (jnp.sqrt(v_hat) + EPS), m, v


def specs(stage: int) -> tuple[P, P, P, P]:
    """Shardings of (params, grads, m, v) at a stage: P() whole on every device, P(AXIS) 1/N."""
    split = PARTITIONED[stage]
    return tuple(P(AXIS) if category in split else P()
                 for category in ("params", "grads", "optimizer", "optimizer"))


def step_fn(model: Model, mesh, stage: int):
    """One training step ``(params, grads, m, v, t, x, target) -> (params, grads, m, v, losses)``;
    x and target are split over the devices by rows (data parallelism); ``losses[d]`` is device
    d's loss on its part of the batch."""
    if stage not in STAGES:
        raise ZeroError(f"stage must be 0, 1, 2 or 3, got {stage!r}.")
    n = mesh.shape[AXIS]

    def per_device(params, grads, m, v, t, x, target):
        if stage == 3:
            # forward: gather the parameters, compute the loss, drop them; backward: gather them
            # again, then reduce-scatter the gradient. The second gather takes ``params + 0 *
            # loss`` so that it depends on the forward pass: otherwise the CPU compiler merges
            # the two gathers and keeps the whole parameters alive in between, the memory
            # stage 3 exists to save.
            loss = model.loss(jax.lax.all_gather(params, AXIS, tiled=True), x, target)
            again = params + 0.0 * jax.lax.stop_gradient(loss)
            full = jax.grad(model.loss)(jax.lax.all_gather(again, AXIS, tiled=True), x, target)
            g = jax.lax.psum_scatter(full, AXIS, tiled=True) / n  # my 1/N of the mean gradient
            p, m, v = adam(params, g, m, v, t)
            return p, g, m, v, loss[None]
        loss, g = jax.value_and_grad(model.loss)(params, x, target)  # this device's batch
        if stage == 0:
            g = jax.lax.psum(g, AXIS) / n  # all-reduce: every device the mean gradient
            p, m, v = adam(params, g, m, v, t)
            return p, g, m, v, loss[None]
        shard = jax.lax.psum_scatter(g, AXIS, tiled=True) / n  # reduce-scatter: my 1/N, summed
        index = jax.lax.axis_index(AXIS)
        size = params.shape[0] // n
        mine = jax.lax.dynamic_slice_in_dim(params, index * size, size)
        mine, m, v = adam(mine, shard, m, v, t)
        p = jax.lax.all_gather(mine, AXIS, tiled=True)  # all-gather the updated parameters
        return p, (g if stage == 1 else shard), m, v, loss[None]  # stage 1 keeps the whole
        # local gradient; loss: each device's loss on its batch (no communication)

    state = specs(stage)
    return jax.jit(jax.shard_map(per_device, mesh=mesh,
                                 in_specs=(*state, P(), P(AXIS), P(AXIS)),
                                 out_specs=(*state, P(AXIS)),
                                 check_vma=False))


def start(model: Model, mesh, stage: int, seed: int = 0):
    """The initial state (params, zero grads, zero m and v), placed as the stage shards it."""
    flat = model.init(seed)
    zeros = np.zeros_like(flat)
    return tuple(jax.device_put(a, NamedSharding(mesh, s))
                 for a, s in zip((flat, zeros, zeros, zeros), specs(stage), strict=True))


def reference(model: Model, x, target, steps: int, seed: int = 0) -> np.ndarray:
    """The same training on one device, with the whole batch."""
    p = jnp.asarray(model.init(seed))
    m = v = jnp.zeros_like(p)
    grad = jax.jit(jax.grad(model.loss))
    for t in range(1, steps + 1):
        p, m, v = adam(p, grad(p, x, target), m, v, t)
    return np.asarray(p)


def bytes_per_device(state) -> dict[str, int]:
    """Measured from the array shards: bytes of each category on one device."""
    held = [a.addressable_shards[0].data.nbytes for a in state]
    return {"params": held[0], "grads": held[1], "optimizer": held[2] + held[3]}


@dataclass(frozen=True)
class Check:
    stage: int
    params: np.ndarray  # after the steps
    max_error: float  # against one device
    measured: dict[str, int]  # bytes per device, by category
    collectives: Collectives  # of one compiled step
    sent_bytes: float  # bytes each device sends per step, from the compiled collectives
    losses: list[float]  # mean loss over the devices, per step (before its update)


def check(model: Model, mesh, stage: int, x, target, steps: int = 3) -> Check:
    """Train ``steps`` steps at ``stage``; compare with one device, with ``memory`` and with
    ``communication`` (float32 parameters and gradients, Adam's m and v: 4 + 4 + 8 bytes).

    Raises:
        CheckFailed: the parameters differ from one device's, the measured bytes differ from
            ``memory(...)``, or the compiled collectives from the stage's.
    """
    n = mesh.shape[AXIS]
    state = start(model, mesh, stage)
    step = step_fn(model, mesh, stage)
    program = compiled.compile_for(step, *state, 1, x, target)
    losses = []
    for t in range(1, steps + 1):
        *state, loss = program(*state, t, x, target)
        losses.append(float(np.mean(loss)))
    params = np.asarray(state[0])
    want = reference(model, x, target, steps)
    error = verify.close(params, want, f"stage {stage} parameters after {steps} steps", 1e-5)
    measured = bytes_per_device(state)
    plan = memory(model.padded, n, stage, param_bytes=4, grad_bytes=4, optimizer_bytes=8)
    verify.same(measured, {"params": plan.params, "grads": plan.grads,
                           "optimizer": plan.optimizer}, f"stage {stage}: bytes per device")
    found = compiled.collectives(program)
    planned = collectives(model.padded, n, stage, param_bytes=4)
    verify.same(sorted((c.kind, c.bytes) for c in found),
                sorted((c.kind, c.bytes) for c in planned),
                f"stage {stage}: the compiled step's collectives (kind, bytes per device)")
    sent = found.sent_bytes()
    verify.require(math.isclose(sent, communication(model.padded, n, stage, param_bytes=4)),
                   f"stage {stage}: the compiled collectives send {sent} bytes per device")
    return Check(stage, params, error, measured, found, sent, losses)
