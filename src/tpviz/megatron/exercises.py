"""Checkers for the Megatron chapter: tensor-parallel MLP and attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import compiled
from tpviz.core.exercises import (
    Wrong,
    as_number,
    call,
    checker,
    expect_array,
    expect_number,
    mesh_1d,
)

AXIS = "model"
DEVICES = 4


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 16), dtype=np.float32)
    target = rng.standard_normal((8, 16), dtype=np.float32)
    a = (rng.standard_normal((16, 32)) / 4).astype(np.float32)
    b = (rng.standard_normal((32, 16)) / 6).astype(np.float32)
    return x, target, a, b


def _loss(x, target, a, b, f, g):
    return jnp.mean((g(jax.nn.gelu(f(x) @ a) @ b) - target) ** 2)


@checker("The conjugate operators f and g")
def check_conjugates(f, g) -> str:
    """``f(x)`` and ``g(x)`` for the mesh axis "model", used in a Megatron MLP whose loss and
    gradients are computed per device inside ``shard_map(check_vma=False)``."""
    x, target, a, b = _data()
    mesh = mesh_1d(DEVICES, AXIS)

    def per_device(x, target, a, b):
        return jax.value_and_grad(_loss, argnums=(0, 2, 3))(x, target, a, b, f, g)

    step = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(), P(None, AXIS), P(AXIS, None)),
                         out_specs=(P(), (P(), P(None, AXIS), P(AXIS, None))), check_vma=False)
    loss, (gx, ga, gb) = call(step, x, target, a, b, what="the MLP built with your f and g")
    ref_loss, (rx, ra, rb) = jax.value_and_grad(_loss, argnums=(0, 2, 3))(
        x, target, a, b, lambda v: v, lambda v: v)
    hint = ("f: forward identity, backward jax.lax.psum(grad, 'model'); g: forward "
            "jax.lax.psum(x, 'model'), backward identity. Use jax.custom_vjp for both.")
    if not np.allclose(loss, ref_loss, rtol=1e-4):
        raise Wrong("the forward pass is wrong: the loss differs from one device's.",
                    "g's forward must add the partial sums of the devices (an all-reduce).")
    if np.allclose(ga, DEVICES * ra, rtol=1e-3) and np.allclose(gb, DEVICES * rb, rtol=1e-3):
        raise Wrong(f"the weight gradients are {DEVICES}x too large: g's backward all-reduces "
                    "a gradient that every device already holds in full.",
                    "g's backward should pass the gradient through unchanged.")
    expect_array(ga, ra, what="the gradient of A", rtol=1e-4, atol=1e-5, hint=hint)
    expect_array(gb, rb, what="the gradient of B", rtol=1e-4, atol=1e-5, hint=hint)
    expect_array(gx, rx, what="the gradient of X", rtol=1e-4, atol=1e-5,
                 hint="Each device holds only its part of the gradient of X: f's backward must "
                      "all-reduce it.")
    kinds = compiled.collectives(step, x, target, a, b).kinds()
    return f"Loss and gradients exact, with {kinds['all-reduce']} all-reduces per step."


@checker("Row-parallel linear layer")
def check_row_parallel(fn) -> str:
    """``fn(h_block, w_block)`` per device: h[T, F/N] @ w[F/N, H], summed over the devices."""
    x, _, a, b = _data(1)
    h = np.asarray(jax.nn.gelu(x @ a))
    program = jax.shard_map(fn, mesh=mesh_1d(DEVICES, AXIS),
                            in_specs=(P(None, AXIS), P(AXIS, None)), out_specs=P(),
                            check_vma=False)
    hint = "Multiply the local blocks, then add the partial sums: jax.lax.psum(..., 'model')."
    y = call(program, h, b, what="your row-parallel layer")
    if y.shape == (8, 16) and np.allclose(y, h[:, :8] @ b[:8], rtol=1e-4, atol=1e-5):
        raise Wrong("the result is one device's partial sum: the other devices' parts are missing.",
                    hint)
    expect_array(y, h @ b, what="the result", rtol=1e-4, atol=1e-4, hint=hint)
    kinds = dict(compiled.collectives(program, h, b).kinds())
    if kinds != {"all-reduce": 1}:
        raise Wrong(f"the compiled program holds {kinds}; a row-parallel layer needs exactly one "
                    "all-reduce.", hint)
    return "One all-reduce of the [T, H] output: the g of Megatron."


@checker("All-reduces per training step")
def check_all_reduces(answer) -> str:
    """A 24-layer transformer, Megatron tensor parallelism: all-reduces per training step."""
    answer = as_number(answer)  # NumPy, JAX, Fraction: the same number
    layers = 24
    if answer == 2 * layers:
        raise Wrong("that counts one direction only.",
                    "Each block has 2 in the forward pass (g) and 2 in the backward pass (f).")
    if answer == layers:
        raise Wrong("that is one per layer.", "Attention and the MLP each end with an all-reduce.")
    expect_number(answer, 4 * layers, hint="2 forward + 2 backward per block.")
    return f"{4 * layers} all-reduces, each of batch × sequence × hidden elements."


@checker("Weight bytes per device")
def check_weight_bytes(answer) -> str:
    """A GPT-3 175B block (H = 12288, F = 4H, no biases), bf16, on 8 devices: bytes per device."""
    answer = as_number(answer)  # NumPy, JAX, Fraction: the same number
    h, n = 12288, 8
    per_device = 12 * h * h * 2 // n  # Q, K, V, O: 4 H^2; A and B: 8 H^2
    if answer == 12 * h * h * 2:
        raise Wrong("that is the whole block.", "Each device holds 1/8 of every weight matrix.")
    if answer == 8 * h * h * 2 // n:
        raise Wrong("that is the MLP only.", "Add the attention projections: 4 H² parameters.")
    if answer == 2 * per_device:
        raise Wrong("that counts 4 bytes per parameter.", "bf16 is 2 bytes.")
    expect_number(answer, per_device, hint="(4 H² + 8 H²) parameters × 2 bytes / 8 devices.")
    return f"{per_device / 2**20:,.0f} MiB per device instead of {8 * per_device / 2**30:.1f} GiB."
