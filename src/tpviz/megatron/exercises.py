"""Checkers for the Megatron chapter: tensor-parallel MLP and attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import build, cost
from tpviz.core.exercises import (
    NotAttempted,
    Wrong,
    as_number,
    checker,
    expect_array,
    expect_bytes,
    expect_number,
    is_stub,
    mesh_1d,
)
from tpviz.megatron.plan import plan

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


def _mlp_step(f, g):
    def per_device(x, target, a, b):
        return jax.value_and_grad(_loss, argnums=(0, 2, 3))(x, target, a, b, f, g)

    return jax.shard_map(per_device, mesh=mesh_1d(DEVICES, AXIS),
                         in_specs=(P(), P(), P(None, AXIS), P(AXIS, None)),
                         out_specs=(P(), (P(), P(None, AXIS), P(AXIS, None))), check_vma=False)


@checker("The conjugate operators f and g")
def check_conjugates(f, g) -> str:
    """``f(x)`` and ``g(x)`` for the mesh axis "model", used in a Megatron MLP whose loss and
    gradients are computed per device inside ``shard_map(check_vma=False)``: values against one
    device, then the all-reduces of the compiled training step (exactly two of [T, H])."""
    x, target, a, b = _data()
    if not (callable(f) and callable(g)):
        raise Wrong("f and g should both be functions.", "Define them with @jax.custom_vjp.")
    ran = build.run(_mlp_step(f, g), None, None, None, x, target, a, b,
                    what="the MLP built with your f and g")
    loss, (gx, ga, gb) = ran.out
    ref_loss, (rx, ra, rb) = jax.value_and_grad(_loss, argnums=(0, 2, 3))(
        x, target, a, b, lambda v: v, lambda v: v)
    hint = ("Go through the table of f and g direction by direction: which of the four "
            "needs jax.lax.psum over 'model'? Define both with jax.custom_vjp.")
    if not np.allclose(loss, ref_loss, rtol=1e-4):
        raise Wrong("the forward pass is wrong: the loss differs from one device's.",
                    "g's forward must add the partial sums of the devices (an all-reduce).")
    if np.allclose(ga, DEVICES * ra, rtol=1e-3) and np.allclose(gb, DEVICES * rb, rtol=1e-3):
        raise Wrong(f"the weight gradients are {DEVICES}x too large: g's backward all-reduces "
                    "a gradient that every device already holds in full.",
                    "g's backward should pass the gradient through unchanged.")
    expect_array(ga, ra, what="the gradient of W1", rtol=1e-4, atol=1e-5, hint=hint)
    expect_array(gb, rb, what="the gradient of W2", rtol=1e-4, atol=1e-5, hint=hint)
    expect_array(gx, rx, what="the gradient of In", rtol=1e-4, atol=1e-5,
                 hint="Each device holds only its part of the gradient of In: f's backward must "
                      "all-reduce it.")
    found = build.moving(ran.program)
    counts = build.kinds(found)
    tokens_hidden = x.size * x.dtype.itemsize  # one [T, H] float32 array
    if counts.get("all-reduce", 0) > 2:
        raise Wrong(f"right values, but the compiled step holds {counts['all-reduce']} "
                    "all-reduces instead of 2: an extra all-reduce in the backward (a gradient "
                    "every device already holds is summed, then scaled back).",
                    "A backward that is already whole needs no communication at all.")
    others = {k: v for k, v in counts.items() if k != "all-reduce"}
    if others or counts.get("all-reduce", 0) != 2:
        raise Wrong(f"right values, but the compiled step holds {build.summary(found)}; "
                    "Megatron's needs exactly 2 all-reduces (g forward, f backward).", hint)
    sizes = sorted(c.bytes for c, _ in found)
    if sizes != [tokens_hidden, tokens_hidden]:
        raise Wrong(f"right values, but the all-reduces move {sizes} bytes; each should be one "
                    f"[T, H] activation of {tokens_hidden:,} bytes.", hint)
    return f"Loss and gradients exact, with 2 all-reduces of {tokens_hidden:,} bytes per step."


@checker("Row-parallel linear layer")
def check_row_parallel(fn) -> str:
    """``fn(h_block, w_block)`` per device: tmp[T, F/N] @ w2[F/N, H], summed over the devices;
    one all-reduce of the [T, H] output in the compiled program."""
    x, _, a, b = _data(1)
    h = np.asarray(jax.nn.gelu(x @ a))
    hint = "Each device's product is a partial sum: which collective adds them over 'model'?"
    ran = build.run(fn, mesh_1d(DEVICES, AXIS), (P(None, AXIS), P(AXIS, None)), P(), h, b,
                    what="your row-parallel layer")
    y = ran.out
    if y.shape == (8, 16) and np.allclose(y, h[:, :8] @ b[:8], rtol=1e-4, atol=1e-5):
        raise Wrong("the result is one device's partial sum: the other devices' parts are missing.",
                    hint)
    expect_array(y, h @ b, what="the result", rtol=1e-4, atol=1e-4, hint=hint)
    found = build.moving(ran.program)
    if build.kinds(found) != {"all-reduce": 1}:
        raise Wrong(f"right values, but the compiled program holds {build.summary(found)}; a "
                    "row-parallel layer needs exactly one all-reduce of its output.", hint)
    if found[0][0].bytes != y.nbytes:
        raise Wrong(f"right values, but the all-reduce moves {found[0][0].bytes:,} bytes, not "
                    f"the [T, H] output's {y.nbytes:,}: reduce the product, not its inputs.",
                    hint)
    return "One all-reduce of the [T, H] output: the g of Megatron."


@checker("Sequence-parallel MLP")
def check_sequence_parallel(fn) -> str:
    """``fn(x, w1, w2)`` per device: x is this device's [T/N, H] slice of the tokens, w1 its
    columns [H, F/N], w2 its rows [F/N, H]; returns its [T/N, H] slice of GeLU(x W1) W2. The
    compiled forward holds one all-gather of x and one reduce-scatter of the output."""
    x, _, a, b = _data(2)
    t, hidden = x.shape
    ran = build.run(fn, mesh_1d(DEVICES, AXIS), (P(AXIS, None), P(None, AXIS), P(AXIS, None)),
                    P(AXIS, None), x, a, b, what="your sequence-parallel MLP")
    hint = ("Before the column-parallel matmul each device needs all the tokens; after the "
            "row-parallel one it needs the sum for its own tokens only.")
    expect_array(ran.out, jax.nn.gelu(x @ a) @ b, what="the output", rtol=1e-4, atol=1e-4,
                 hint=hint)
    found = build.moving(ran.program)
    counts = build.kinds(found)
    full = t * hidden * x.dtype.itemsize  # one whole [T, H] activation
    if counts.get("all-reduce"):
        raise Wrong(f"right values, but the compiled program holds {build.summary(found)}: an "
                    "all-reduce sends twice the bytes of the reduce-scatter the plan needs.",
                    hint)
    if any(c.kind == "all-gather" and c.full_bytes != full for c, _ in found):
        raise Wrong(f"right values, but the compiled program holds {build.summary(found)}: it "
                    "gathers something other than the [T, H] activations (the weights stay "
                    "split in tensor parallelism).", hint)
    if counts != {"all-gather": 1, "reduce-scatter": 1}:
        raise Wrong(f"right values, but the compiled program holds {build.summary(found)}; "
                    "the plan is one all-gather and one reduce-scatter.", hint)
    return (f"One all-gather and one reduce-scatter of {full:,} bytes: the same bytes as "
            "Megatron's all-reduce, with the activations outside the block split by N.")


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
    expect_bytes(answer, 4 * layers,
                  hint="Count the all-reduces of one block in each direction, then the blocks.")
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
        raise Wrong("that is the MLP only.", "Add the attention projections.")
    if answer == 2 * per_device:
        raise Wrong("that counts 4 bytes per parameter.", "bf16 is 2 bytes.")
    expect_bytes(answer, per_device,
                  hint="Count the parameters of the four attention projections and of the two "
                       "MLP matrices, then the bytes, then one device's share.")
    return f"{per_device / 2**20:,.0f} MiB per device instead of {8 * per_device / 2**30:.1f} GiB."


@checker("Bytes a device sends per training step")
def check_tp_bytes(answer) -> str:
    """One GPT-3 175B block (H = 12288, F = 4H, 96 heads), batch 8 × sequence 2048, bf16, on
    N = 8 devices: bytes each device sends in one training step, ring all-reduces."""
    p = plan(8 * 2048, 12288, 4 * 12288, 96, 8, "bf16")
    one = p.all_reduce_bytes  # B · S · H · 2 bytes
    hint = ("How many all-reduces does a block run per training step, and how many bytes does "
            "a ring all-reduce of V bytes make each device send?")
    if is_stub(answer):
        raise NotAttempted
    if answer == 4 * one:
        raise Wrong("that is 4 × V, the size of the arrays, not what a ring sends.", hint)
    if answer == 2 * 2 * 7 / 8 * one:  # also 4 all-gathers' worth
        raise Wrong("that is half: the forward pass only, or an all-gather's bytes for each "
                    "all-reduce.", hint)
    if answer == 4 * 2 * one:
        raise Wrong("that is the large-N limit 2V per all-reduce; with N = 8 a ring sends less.",
                    hint)
    expect_bytes(answer, p.ring_bytes_per_step, hint=hint)
    return (f"{p.ring_bytes_per_step / 2**30:.2f} GiB per block per step. More devices would "
            "not shrink it: the ring's 2(N-1)/N only grows towards 2.")


TP_DESIGN = dict(hidden=5120, heads=40, layers=40, tokens=8 * 2048, sequence=2048,
                 system="H100 (NVLink)", memory=10e9, ratio=0.5)


def tp_design(n: int) -> tuple[int, float]:
    """Weight bytes per device (all layers, bf16) and communication / compute of a training step
    (cost model, ring all-reduces, no overlap assumed) for GPT-3 13B split over ``n`` devices."""
    c = TP_DESIGN
    p = plan(c["tokens"], c["hidden"], 4 * c["hidden"], c["heads"], n, "bf16")
    e = cost.estimate(p.flops(c["sequence"], training=True), p.collectives(training=True),
                      cost.SYSTEMS[c["system"]])
    return c["layers"] * p.weight_bytes_per_device, e.comm_s / e.compute_s


@checker("Design: choose a tensor-parallel degree")
def check_tp_degree(n, weight_bytes, comm_percent) -> str:
    """GPT-3 13B (H = 5120, F = 4H, 40 heads, 40 layers), 8 × 2048 tokens per step, bf16 weights,
    one 8-GPU H100 NVLink node: the N with at most 10 GB of weights per device and communication
    at most half the compute time; report the weight bytes per device and the communication
    time as a percentage of the compute time."""
    if any(is_stub(v) for v in (n, weight_bytes, comm_percent)):
        raise NotAttempted
    if n not in (1, 2, 4, 8):
        raise Wrong(f"N = {n!r}: inside one 8-GPU node, with 40 heads split evenly, N is 1, 2, 4 "
                    "or 8.")
    held, ratio = tp_design(n)
    expect_bytes(weight_bytes, held, what="your weight bytes per device",
                  hint="12 H² parameters per block, 40 blocks, 2 bytes each, 1/N per device.")
    expect_number(comm_percent, 100 * ratio, what="your communication / compute in %", rel=0.02,
                  hint="Compute: the plan's training FLOPs / R. Communication: 4 ring "
                       "all-reduces of B·S·H bf16 values / W.")
    if held > TP_DESIGN["memory"]:
        raise Wrong(f"N = {n}: {held / 1e9:.1f} GB of weights per device, over 10 GB.",
                    "More devices divide the weights further.")
    if ratio > TP_DESIGN["ratio"]:
        raise Wrong(f"N = {n}: communication is {ratio:.0%} of compute, over 50 %.",
                    "Compute per device shrinks with N; the all-reduces do not.")
    return (f"N = {n}: {held / 1e9:.1f} GB of weights per device, communication {ratio:.0%} of "
            "compute. The smallest N that fits is also the one that communicates least.")
