"""Real ZeRO / FSDP training steps in JAX, layer by layer, on a 1D ``"data"`` mesh of N devices.

The model is an MLP of L layers of width H, ``h <- tanh(h W_l + b_l)`` (the last layer without
tanh), loss ``mean((h - target)^2)``. Its parameters are kept **per layer**: layer l is one
array of R rows (W_l's H rows, b_l, zero rows up to a multiple of N; row-major, the layer's
vector of H^2 + H numbers padded), so that "partitioned" means "device d holds the d-th 1/N of
every layer's rows". Adam's m and v are
kept the same way. The backward pass is written out layer by layer, so each stage decides what
happens to a layer's gradient the moment it exists:

======  =========  ===========  ===========================================================
stage   params     Adam m, v    per layer, in one step
======  =========  ===========  ===========================================================
0       whole      whole        all-reduce the layer's gradient (every device updates all)
1       whole      1/N          keep the *whole* gradient until the backward pass ends, then
                                reduce-scatter it; update my 1/N; all-gather the parameters
2       whole      1/N          reduce-scatter the layer's gradient as soon as it exists (the
                                whole gradient never lives at once); update; all-gather
3       1/N        1/N          all-gather the layer just before its forward, drop it after;
                                all-gather it again for its backward; reduce-scatter its
                                gradient as it is produced; update my 1/N (FSDP)
======  =========  ===========  ===========================================================

A data dependence (:func:`after`) ties each gather (or reduce-scatter) to the activation (or
gradient) flowing through the layers: XLA cannot move a layer's gather earlier than the layer,
cannot merge the forward's and the backward's gathers (what ``jax.checkpoint`` achieves with an
optimization barrier), and cannot postpone a stage-2 reduce-scatter to the end or combine it
with the next layer's. The state
(params, m, v) is donated, as in a real training step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.errors import ZeroError
from tpviz.zero.plan import STAGES

AXIS = "data"
LR, B1, B2, EPS = 1e-2, 0.9, 0.999, 1e-8


@dataclass(frozen=True)
class Model:
    """An MLP of ``layers`` layers of ``width`` H. Layer l is one array ``A_l: f32[R, H]``: the
    rows of W_l (H of them), then b_l, then zero rows up to R = the next multiple of the devices,
    so that ``tanh(h W_l + b_l) = tanh([h, 1, 0...] A_l)`` and its gradient ``[h, 1, 0...]^T dz``
    is one matrix product. Row-major, A_l is the layer's vector of (H + 1) H numbers padded with
    zeros to a multiple of N H; split over rows, device d holds the d-th 1/N of it."""

    layers: int
    width: int
    devices: int

    @property
    def rows(self) -> int:
        """R: H + 1 rounded up to a multiple of the devices."""
        return math.ceil((self.width + 1) / self.devices) * self.devices

    @property
    def layer_count(self) -> int:
        """Parameters of one layer: H^2 + H."""
        return self.width * self.width + self.width

    @property
    def layer_padded(self) -> int:
        """Numbers each layer stores, padding included: R H."""
        return self.rows * self.width

    @property
    def count(self) -> int:
        """Ψ: parameters of the model."""
        return self.layers * self.layer_count

    @property
    def padded(self) -> int:
        """Ψ with every layer's padding: the numbers each stage stores."""
        return self.layers * self.layer_padded

    def augment(self, h):
        """[h, 1, 0, ...]: f32[rows, R], the layer input that multiplies A."""
        ones = jnp.ones((h.shape[0], 1), h.dtype)
        zeros = jnp.zeros((h.shape[0], self.rows - self.width - 1), h.dtype)
        return jnp.concatenate([h, ones, zeros], axis=1)

    def init(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        h = self.width
        return [np.concatenate([rng.standard_normal((h, h)) / np.sqrt(h),
                                np.zeros((self.rows - h, h))]).astype(np.float32)
                for _ in range(self.layers)]

    def loss(self, params, x, target):
        """The single-device reference: the loss of the whole model (autodiff gives its
        gradient)."""
        h = x
        for i, a in enumerate(params):
            h = self.augment(h) @ a
            h = jnp.tanh(h) if i < self.layers - 1 else h
        return jnp.mean((h - target) ** 2)


def after(x, y):
    """``x``, made to wait for ``y``: ``x + 0 * y[0]``. XLA's CPU compiler drops
    ``optimization_barrier`` before it schedules and combines collectives, so a data dependence
    does the barrier's job (XLA does not fold ``0 * y``: it would change NaN and infinity)."""
    return x + 0.0 * y.reshape(-1)[0]


def adam(p, g, m, v, t):
    """One Adam update (learning rate LR, betas B1 and B2) of parameters p with gradient g."""
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    m_hat, v_hat = m / (1 - B1**t), v / (1 - B2**t)
    return p - LR * m_hat / (jnp.sqrt(v_hat) + EPS), m, v


def specs(stage: int) -> tuple[P, P]:
    """Shardings of each layer's (params, Adam state) vectors: P() whole, P(AXIS) split."""
    return (P(AXIS) if stage == 3 else P()), (P(AXIS) if stage else P())


def step_fn(model: Model, mesh, stage: int):
    """One training step ``(params, m, v, t, x, target) -> (params, m, v, losses)``; params, m
    and v are tuples of L per-layer vectors (donated); x and target are split by rows."""
    if stage not in STAGES:
        raise ZeroError(f"stage must be 0, 1, 2 or 3, got {stage!r}.")
    n, L = mesh.shape[AXIS], model.layers
    def gather(flat):  # stage 3: my R/N rows of a layer -> the whole layer
        return jax.lax.all_gather(flat, AXIS, tiled=True) if stage == 3 else flat  # f32[R, H]

    def scatter(g):  # the layer's gradient, summed over devices: my 1/N of the mean
        return jax.lax.psum_scatter(g, AXIS, tiled=True) / n

    def per_device(params, m, v, t, x, target):
        # params[l]: f32[R, H] (stage 3: f32[R/N, H]); m[l], v[l]: f32[R/N, H] (0: f32[R, H])
        # x, target: f32[rows/N, H]
        h, inputs, outputs = x, [], []
        for i in range(L):  # forward: gather layer i, use it, drop it
            shard = after(params[i], h)  # the gather waits for the previous layer
            a = model.augment(h)  # a: f32[rows/N, R]
            inputs.append(a)
            h = a @ gather(shard)  # h: f32[rows/N, H]
            h = jnp.tanh(h) if i < L - 1 else h
            outputs.append(h)
        loss = jnp.mean((h - target) ** 2)
        dy = 2 * (h - target) / h.size  # dy: f32[rows/N, H]
        grads = [None] * L
        for i in reversed(range(L)):  # backward: gather layer i again, use it, drop it
            shard = after(params[i], dy)  # gathered again: not the forward's copy
            w = gather(shard)[:model.width]  # W_i: f32[H, H]
            dz = dy * (1 - outputs[i] ** 2) if i < L - 1 else dy
            g = inputs[i].T @ dz  # g: f32[R, H], the layer's gradient on my batch
            dy = dz @ w.T
            if stage == 0:
                g = jax.lax.psum(g, AXIS) / n  # all-reduced as produced
                dy = after(dy, g)
            elif stage >= 2:
                g = scatter(g)  # reduce-scattered before the next layer's backward
                dy = after(dy, g)
            grads[i] = g
        if stage == 1:  # each reduce-scatter waits for the last gradient: all live at once
            grads = [scatter(after(g, grads[0])) for g in grads]
        index = jax.lax.axis_index(AXIS)
        new_p, new_m, new_v = [], [], []
        for i in range(L):
            if stage in (1, 2):  # update my 1/N, then all-gather the layer's parameters
                size = model.rows // n
                mine = jax.lax.dynamic_slice_in_dim(params[i], index * size, size)
                mine, mi, vi = adam(mine, grads[i], m[i], v[i], t)
                p = jax.lax.all_gather(mine, AXIS, tiled=True)
            else:
                p, mi, vi = adam(params[i], grads[i], m[i], v[i], t)
            new_p.append(p)
            new_m.append(mi)
            new_v.append(vi)
        return tuple(new_p), tuple(new_m), tuple(new_v), loss[None]

    p_spec, s_spec = specs(stage)
    state = ((p_spec,) * L, (s_spec,) * L, (s_spec,) * L)
    return jax.jit(jax.shard_map(per_device, mesh=mesh,
                                 in_specs=(*state, P(), P(AXIS), P(AXIS)),
                                 out_specs=(*state, P(AXIS)), check_vma=False),
                   donate_argnums=(0, 1, 2))


def start(model: Model, mesh, stage: int, seed: int = 0):
    """The initial state (params, zero m and v), placed as the stage shards it."""
    p_spec, s_spec = specs(stage)
    params = tuple(jax.device_put(a, NamedSharding(mesh, p_spec)) for a in model.init(seed))
    zeros = [np.zeros((model.rows, model.width), np.float32) for _ in range(model.layers)]
    m = tuple(jax.device_put(z, NamedSharding(mesh, s_spec)) for z in zeros)
    v = tuple(jax.device_put(z, NamedSharding(mesh, s_spec)) for z in zeros)
    return params, m, v


def reference(model: Model, x, target, steps: int, seed: int = 0) -> list[np.ndarray]:
    """The same training on one device, with the whole batch."""
    p = [jnp.asarray(a) for a in model.init(seed)]
    m = [jnp.zeros_like(a) for a in p]
    v = [jnp.zeros_like(a) for a in p]
    grad = jax.jit(jax.grad(model.loss))
    for t in range(1, steps + 1):
        g = grad(p, x, target)
        p, m, v = (list(z) for z in zip(*map(adam, p, g, m, v, [t] * len(p)), strict=True))
    return [np.asarray(a) for a in p]
