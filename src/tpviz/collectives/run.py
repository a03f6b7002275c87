"""Run collective plans and data-parallel training steps on a real mesh.

``follow(plan, axis)`` turns a ring or halving-doubling plan into per-device code: one
``jax.lax.ppermute`` per step, each device sending the chunks the plan names and adding (or
copying) what it receives. ``program(plan, mesh)`` wraps it in ``jax.shard_map``.

Data parallelism: every device holds the whole model and 1/N of the batch. The gradient of the
mean loss over the batch is the mean of the N per-device gradients, so one all-reduce of the
gradients (``pmean``) makes every device's step the single-device step on the whole batch.
``dp_step_shard_map`` writes that all-reduce by hand; ``dp_step_jit`` shards the batch with a
``NamedSharding`` and lets GSPMD insert it.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.collectives.plan import CollectivePlan
from tpviz.compat import pvary
from tpviz.core.kinds import AxisOf, JaxMesh, Rate
from tpviz.errors import ArgumentError


def _tables(p: CollectivePlan) -> list[tuple[list[tuple[int, int]], int, bool, list, list]]:
    """Per step: the (src, dst) pairs, chunks per send, reduce?, first chunk each device sends
    and first chunk each device receives (indexed by device)."""
    if p.algorithm not in ("ring", "halving-doubling"):
        raise ArgumentError(f"follow runs 'ring' and 'halving-doubling' plans, got "
                            f"{p.algorithm!r}: in its other plans some devices sit out a step.")
    out = []
    for step in p.moves:
        size = len(step[0].chunks)
        send, recv = [0] * p.devices, [0] * p.devices
        for m in step:  # every device sends one contiguous run of `size` chunks per step
            send[m.src], recv[m.dst] = m.chunks[0], m.chunks[0]
        out.append(([(m.src, m.dst) for m in step], size, step[0].reduce, send, recv))
    return out


def follow(p: CollectivePlan, axis: str):
    """Per-device code (for inside ``jax.shard_map`` over ``axis`` of size N) doing the plan.

    The returned function takes this device's array: ``f32[n]`` for an all-reduce or a
    reduce-scatter, its chunk ``f32[n/N]`` for an all-gather; it returns ``f32[n]``, or the
    device's reduced chunk ``f32[n/N]`` for a reduce-scatter.
    """
    k, tables = p.devices, _tables(p)

    def per_device(x):
        me = jax.lax.axis_index(axis)
        if p.op == "all-gather":  # x: f32[n/N], this device's chunk
            chunks = jnp.zeros((k, x.shape[0]), x.dtype).at[me].set(x)  # chunks: f32[N, n/N]
        else:  # x: f32[n]
            chunks = x.reshape(k, -1)  # chunks: f32[N, n/N]
        for pairs, size, reduce, send, recv in tables:
            piece = jax.lax.dynamic_slice_in_dim(chunks, jnp.asarray(send)[me], size)
            got = jax.lax.ppermute(piece, axis, pairs)  # got: f32[size, n/N], from my source
            at = jnp.asarray(recv)[me]
            if reduce:
                got = got + jax.lax.dynamic_slice_in_dim(chunks, at, size)
            chunks = jax.lax.dynamic_update_slice_in_dim(chunks, got, at, axis=0)
        if p.op == "reduce-scatter":
            return jax.lax.dynamic_index_in_dim(chunks, me, keepdims=False)  # f32[n/N]
        return chunks.reshape(-1)  # f32[n]

    return per_device


def program(p: CollectivePlan, mesh: JaxMesh, axis: AxisOf() | None = None):
    """The plan as a ``jax.shard_map`` program over a global ``[N · n]`` array split over
    ``axis`` (default: the mesh's only axis); the result is split the same way."""
    axis = axis or mesh.axis_names[0]
    if mesh.shape[axis] != p.devices:
        raise ArgumentError(f"the plan is for {p.devices} devices but mesh axis {axis!r} has "
                            f"{mesh.shape[axis]}; plan for {mesh.shape[axis]} devices.")
    return jax.jit(jax.shard_map(follow(p, axis), mesh=mesh, in_specs=P(axis),
                                 out_specs=P(axis)))


def psum_program(mesh, axis: str | None = None, op: str = "all-reduce"):
    """The reference: JAX's own collective for ``op`` in the same layout as :func:`program`."""
    axis = axis or mesh.axis_names[0]
    body = {"all-reduce": lambda x: jax.lax.psum(x, axis),
            "reduce-scatter": lambda x: jax.lax.psum_scatter(x, axis, tiled=True),
            "all-gather": lambda x: jax.lax.all_gather(x, axis, tiled=True)}[op]
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(axis), out_specs=P(axis)))


# ---- data parallelism -------------------------------------------------------------------------

def init_mlp(seed: int = 0, sizes: tuple[int, ...] = (8, 32, 4)) -> dict:
    """A small MLP's parameters ``{"w0", "b0", "w1", "b1", ...}`` (float32, seeded)."""
    rng = np.random.default_rng(seed)
    params = {}
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        params[f"w{i}"] = jnp.asarray(rng.normal(0, a ** -0.5, (a, b)), jnp.float32)
        params[f"b{i}"] = jnp.zeros((b,), jnp.float32)
    return params


def loss_fn(params: dict, x, y):
    """Mean squared error of the MLP (tanh between layers) on a batch ``x: f32[B, D]``."""
    h, n = x, len(params) // 2
    for i in range(n):
        h = h @ params[f"w{i}"] + params[f"b{i}"]
        h = jnp.tanh(h) if i < n - 1 else h
    return jnp.mean((h - y) ** 2)


def sgd_step(params: dict, x, y, lr: float = 0.1) -> dict:
    """One SGD step on the whole batch, on one device: the reference."""
    grads = jax.grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda w, g: w - lr * g, params, grads)


def dp_step_shard_map(mesh: JaxMesh, axis: AxisOf() | None = None, lr: Rate = 0.1):
    """Data parallel with ``shard_map``: each device takes the gradient of its B/N examples,
    then ``pmean`` (an all-reduce, divided by N) averages the gradients."""
    axis = axis or mesh.axis_names[0]

    def per_device(params, x, y):  # params: replicated; x: f32[B/N, D], y: f32[B/N, O]
        mine = pvary(params, axis)  # this device's copy (else grad would sum over devices)
        grads = jax.grad(loss_fn)(mine, x, y)  # the gradient of this device's B/N examples
        grads = jax.lax.pmean(grads, axis)  # all-reduce: the mean over all B examples
        return jax.tree.map(lambda w, g: w - lr * g, params, grads)

    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(axis), P(axis)),
                                 out_specs=P()))


def dp_step_jit(mesh: JaxMesh, axis: AxisOf() | None = None, lr: Rate = 0.1):
    """Data parallel by GSPMD: the single-device step, with the batch split over ``axis`` and
    the parameters replicated; the compiler inserts the all-reduce of the gradients."""
    axis = axis or mesh.axis_names[0]
    whole, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(axis))
    return jax.jit(lambda params, x, y: sgd_step(params, x, y, lr),
                   in_shardings=(whole, split, split), out_shardings=whole)
