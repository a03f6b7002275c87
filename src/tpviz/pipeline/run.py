"""A numerics demonstration: a pipelined MLP (one layer ``y = tanh(x W + b)`` per model chunk,
chunk s on device ``s % stages``) driven op by op from Python by a schedule.

It shows that every schedule, the interleaved and zero-bubble ones included, computes the
single-device loss and gradients. It measures nothing about memory or communication: each op is
its own small program and arrays move with ``device_put``. The pipeline measured for real is
:mod:`tpviz.pipeline.spmd`, one compiled SPMD program.

Each ``F`` runs the layer on its device and sends the output to the next chunk's device; each
``B`` computes the input gradient and sends it back; each ``W`` (or the second half of an unsplit
``B``) accumulates the weight gradients. The ops run in the order of the simulated timeline, so
every op's inputs exist when it runs. The loss is ``sum((y - target)^2) / (2 * batch)``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from tpviz.errors import DeviceSetupError, ShardingError
from tpviz.pipeline.plan import Schedule
from tpviz.pipeline.simulate import simulate


@jax.jit
def layer_forward(w, b, x):
    return jnp.tanh(x @ w + b)


@jax.jit
def layer_backward_input(w, y, dy):
    """B: the gradient through tanh (dz) and the gradient w.r.t. the layer's input."""
    dz = dy * (1 - y * y)
    return dz, dz @ w.T


@jax.jit
def layer_backward_weights(x, dz):
    """W: the weight gradients, from the saved input and dz."""
    return x.T @ dz, dz.sum(axis=0)


def loss_fn(params, x, target):
    """The single-device reference model and its loss."""
    for w, b in params:
        x = jnp.tanh(x @ w + b)
    return jnp.sum((x - target) ** 2) / (2 * x.shape[0])


def init(sizes: list[int], seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Weights of an MLP with layer widths ``sizes`` (len(sizes) - 1 layers)."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((a, b), dtype=np.float32) / np.sqrt(a),
             0.1 * rng.standard_normal(b, dtype=np.float32))
            for a, b in itertools.pairwise(sizes)]


@dataclass(frozen=True)
class Result:
    loss: float
    grads: list[tuple[jax.Array, jax.Array]]  # per chunk, on its device


def run(sched: Schedule, params, x, target, devices) -> Result:
    """Train step (loss and gradients, no update) of the MLP ``params`` under ``sched``.

    Raises:
        ShardingError: the layers don't match the schedule's chunks, or the batch does not
            split into the microbatches.
        DeviceSetupError: fewer devices than stages.
    """
    p, m, n = sched.stages, sched.microbatches, sched.stages * sched.chunks
    if len(params) != n:
        raise ShardingError(f"the schedule has {p} stages x {sched.chunks} chunks = {n} chunks, "
                            f"one layer each, but the model has {len(params)} layers.")
    if len(devices) < p:
        raise DeviceSetupError(f"{p} stages need {p} devices, only {len(devices)} given; call "
                               f"tpviz.setup_devices({p}) in a fresh kernel.")
    batch = x.shape[0]
    if batch % m:
        raise ShardingError(f"the batch of {batch} does not split into {m} equal microbatches; "
                            f"choose a number of microbatches that divides {batch}.")
    home = [devices[s % p] for s in range(n)]
    placed = [jax.device_put(wb, home[s]) for s, wb in enumerate(params)]
    xs = jnp.split(jnp.asarray(x), m)
    ts = jnp.split(jnp.asarray(target), m)
    split = sched.has_weight_ops
    timeline = simulate(sched)
    order = sorted(((start, d, op) for d in range(p)
                    for op, start, _ in timeline.spans(d)), key=lambda r: (r[0], r[1]))

    inbox: dict[tuple[int, int], jax.Array] = {}  # sent to chunk s: activation or gradient
    saved: dict[tuple[int, int], tuple] = {}  # (microbatch, chunk) -> arrays held for backward
    grads = [None] * n
    loss = 0.0
    for _, _, (kind, mb, s) in order:
        w, b = placed[s]
        if kind == "F":
            h = jax.device_put(xs[mb], home[s]) if s == 0 else inbox.pop(("F", mb, s))
            y = layer_forward(w, b, h)
            saved[mb, s] = (h, y)
            if s < n - 1:
                inbox["F", mb, s + 1] = jax.device_put(y, home[s + 1])  # send the activation
        elif kind == "B":
            h, y = saved[mb, s]
            if s == n - 1:
                error = y - jax.device_put(ts[mb], home[s])
                dy = error / batch
                loss = loss + jnp.sum(error * error) / (2 * batch)
            else:
                dy = inbox.pop(("B", mb, s))
            dz, dh = layer_backward_input(w, y, dy)
            if s > 0:
                inbox["B", mb, s - 1] = jax.device_put(dh, home[s - 1])  # send the gradient
            if split:
                saved[mb, s] = (h, dz)  # W still needs the input and dz
            else:
                _accumulate(grads, s, layer_backward_weights(h, dz))
                del saved[mb, s]
        else:
            h, dz = saved.pop((mb, s))
            _accumulate(grads, s, layer_backward_weights(h, dz))
    return Result(float(loss), grads)


def _accumulate(grads: list, s: int, g: tuple) -> None:
    grads[s] = g if grads[s] is None else jax.tree.map(jnp.add, grads[s], g)

