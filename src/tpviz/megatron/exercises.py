"""Checkers for the Megatron chapter: tensor-parallel MLP and attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import cost, harness
from tpviz.core.exercises import (
    NotAttempted,
    Wrong,
    as_number,
    checker,
    expect_bytes,
    expect_number,
    is_stub,
)
from tpviz.megatron.plan import plan

AXIS = "model"
DEVICES = 4


# the library's layers and operators: each solves part of this chapter's builds
LAYERS = ("tpviz.megatron.row_parallel", "tpviz.megatron.column_parallel", "tpviz.megatron.mlp",
          "tpviz.megatron.block", "tpviz.megatron.attention", "tpviz.megatron.forward",
          "tpviz.megatron.train_step", "tpviz.megatron.copy_to_tp_region",
          "tpviz.megatron.reduce_from_tp_region")
MODEL = ("model",)


def _mlp_inputs(s: dict, rng) -> tuple:
    t, h, f = s["T"], s["H"], s["F"]
    return (rng.standard_normal((t, h), dtype=np.float32),
            rng.standard_normal((t, h), dtype=np.float32),
            (rng.standard_normal((h, f)) / 4).astype(np.float32),
            (rng.standard_normal((f, h)) / 6).astype(np.float32))


def _loss(x, target, a, b, f, g):
    return jnp.mean((g(jax.nn.gelu(f(x) @ a) @ b) - target) ** 2)


def _grads(x, target, a, b, f=lambda v: v, g=lambda v: v):
    return jax.value_and_grad(_loss, argnums=(0, 2, 3))(x, target, a, b, f, g)


def _mlp_step(answer, case):
    f, g = answer
    if not (callable(f) and callable(g)):
        raise Wrong("f and g should both be functions.", "Define them with @jax.custom_vjp.")
    return jax.shard_map(lambda *args: _grads(*args, f=f, g=g), mesh=case.mesh,
                         in_specs=(P(), P(), P(None, AXIS), P(AXIS, None)),
                         out_specs=(P(), (P(), P(None, AXIS), P(AXIS, None))), check_vma=False)


def _conjugate_mistakes(case, got, want) -> str | None:
    (loss, (gx, ga, gb)), (ref_loss, (rx, ra, rb)) = got, want
    n = case.n
    if not np.allclose(loss, ref_loss, rtol=1e-4):
        return "the forward pass is wrong: the loss differs from one device's."
    if np.allclose(ga, n * np.asarray(ra), rtol=1e-3) and np.allclose(gb, n * np.asarray(rb),
                                                                       rtol=1e-3):
        return (f"the weight gradients are {n}x too large: a gradient that every device already "
                "holds in full is added over the devices in the backward pass.")
    if np.allclose(ga, ra, rtol=1e-4, atol=1e-5) and not np.allclose(gx, rx, rtol=1e-3,
                                                                       atol=1e-5):
        parts = [np.asarray(s.data) for s in getattr(gx, "addressable_shards", ())]
        if parts and np.allclose(sum(parts), rx, rtol=1e-3, atol=1e-5):
            return ("the gradient of In is wrong: each device holds only its part of it, and "
                    "the parts are never added.")
        ratio = float(np.vdot(gx, rx) / np.vdot(rx, rx))
        if np.allclose(gx, ratio * np.asarray(rx), rtol=1e-3, atol=1e-5):
            return (f"the gradient of In is {ratio:.3g} times what it should be, on "
                    f"{n} devices: the devices' parts are added, then scaled.")
        return "the gradient of In is wrong, and the weight gradients are right."
    return None


CONJUGATES = harness.Build(
    what="the MLP built with your f and g", layouts=(
        "In[T, H]", "Target[T, H]", "W1[H, F_{model}]", "W2[F_{model}, H]"),
    out=None, axes=MODEL, program=_mlp_step, inputs=_mlp_inputs, reference=_grads,
    cases=(((4,), {"T": 8, "H": 16, "F": 32}), ((2,), {"T": 6, "H": 8, "F": 24})),
    out_names=("the loss", "the gradient of In", "the gradient of W1", "the gradient of W2"),
    diagnose=_conjugate_mistakes,
    collectives=lambda case: [harness.Expect("all-reduce", case.nbytes("In"), MODEL, count=2,
                                             what="one [T, H] activation")],
    unavailable=LAYERS,
    hint="Go through the table of f and g direction by direction: which of the four needs an "
         "all-reduce over 'model', and which must leave the value (or the gradient) as it is?",
    praise="Loss and gradients exact, with Megatron's two all-reduces per step (g forward, f "
           "backward).", rtol=1e-4, atol=1e-5)


@checker("The conjugate operators f and g")
def check_conjugates(f, g) -> str:
    """``f(x)`` and ``g(x)`` for the mesh axis "model", used in a Megatron MLP whose loss and
    gradients are computed per device inside ``shard_map(check_vma=False)``, on 4 and 2 devices
    at several sizes: values against one device, then the all-reduces of the compiled training
    step (exactly two of [T, H])."""
    return harness.grade((f, g), CONJUGATES)


ROW = harness.Build(
    what="your row-parallel layer", layouts=("Tmp[T, F]", "W2[F_{model}, H]"), out="Out[T, H]",
    axes=MODEL, inputs=lambda s, rng: (
        np.asarray(jax.nn.gelu(rng.standard_normal((s["T"], s["F"]), dtype=np.float32))),
        (rng.standard_normal((s["F"], s["H"])) / 6).astype(np.float32)),
    reference=lambda tmp, w2: np.asarray(tmp) @ np.asarray(w2),
    cases=(((4,), {"T": 8, "F": 32, "H": 16}), ((4,), {"T": 6, "F": 48, "H": 8}),
           ((2,), {"T": 8, "F": 32, "H": 16})),
    collectives=lambda case: [harness.Expect(
        "all-reduce", case.sizes["T"] * case.sizes["H"] * 4, MODEL, what="the [T, H] output")],
    unavailable=LAYERS,
    hint="Device i holds rows of W2: which columns of Tmp meet exactly those rows in the "
         "product? Each device's product is then a partial sum: which collective adds them?",
    praise="Each device multiplied the columns of Tmp that meet its rows of W2, and one "
           "all-reduce added the partial sums.", rtol=1e-4, atol=1e-4)


@checker("Row-parallel linear layer")
def check_row_parallel(fn) -> str:
    """``fn(tmp, w2)`` per device: tmp the whole Tmp[T, F] (Megatron's input_is_parallel=False),
    w2 this device's rows [F/N, H]; returns the whole Tmp W2 on every device, with one
    all-reduce of the [T, H] output; on 4 and 2 devices at several sizes."""
    return harness.grade(fn, ROW)


SEQUENCE = harness.Build(
    what="your sequence-parallel MLP",
    layouts=("In[T_{model}, H]", "W1[H, F_{model}]", "W2[F_{model}, H]"),
    out="Out[T_{model}, H]", axes=MODEL,
    inputs=lambda s, rng: tuple(a for i, a in enumerate(_mlp_inputs(s, rng)) if i != 1),
    reference=lambda x, a, b: jax.nn.gelu(x @ a) @ b,
    cases=(((4,), {"T": 8, "H": 16, "F": 32}), ((4,), {"T": 12, "H": 8, "F": 16}),
           ((2,), {"T": 8, "H": 16, "F": 32})),
    collectives=lambda case: [
        harness.Expect("all-gather", case.nbytes("In"), MODEL, what="the [T, H] input"),
        harness.Expect("reduce-scatter", case.nbytes("In"), MODEL,
                       what="the [T, H] output")],
    unavailable=LAYERS,
    hint="Before the column-parallel matmul each device needs all the tokens; after the "
         "row-parallel one it needs the sum for its own tokens only.",
    praise="The same bytes as Megatron's all-reduce, with the activations outside the block "
           "split by N.", rtol=1e-4, atol=1e-4)


@checker("Sequence-parallel MLP")
def check_sequence_parallel(fn) -> str:
    """``fn(x, w1, w2)`` per device: x is this device's [T/N, H] slice of the tokens, w1 its
    columns [H, F/N], w2 its rows [F/N, H]; returns its [T/N, H] slice of GeLU(x W1) W2. On 4
    and 2 devices at several sizes, the compiled forward holds exactly one all-gather of the
    tokens and one reduce-scatter of the output, each of the [T, H] bytes."""
    return harness.grade(fn, SEQUENCE)


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
                 system="H100 (NVLink)", memory=16e9, ratio=0.5)


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
    one 8-GPU H100 NVLink node: an N with at most 16 GB of weights per device and communication
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
        raise Wrong(f"N = {n}: {held / 1e9:.1f} GB of weights per device, over 16 GB.",
                    "More devices divide the weights further.")
    if ratio > TP_DESIGN["ratio"]:
        raise Wrong(f"N = {n}: communication is {ratio:.0%} of compute, over 50 %.",
                    "Compute per device shrinks with N; the all-reduces do not.")
    return (f"N = {n}: {held / 1e9:.1f} GB of weights per device, communication {ratio:.0%} of "
            "compute: both rules hold. Of the degrees that satisfy them, the smaller leaves more "
            "memory used and less time communicating; the larger, the reverse.")
