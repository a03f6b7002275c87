"""Checkers for chapter 11: activation bytes, recomputation, axis placement, bubble, design."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from tpviz.core.exercises import (
    Wrong,
    as_integer,
    as_number,
    checker,
    expect_bytes,
    expect_number,
    only_keys,
)
from tpviz.errors import TpvizError
from tpviz.together.memory import activation_bytes
from tpviz.together.plan import CLUSTERS, Cluster, Plan, plan
from tpviz.together.search import best

# GPT-3 175B's layer: s, b, h, a
S, B, H, A = 2048, 1, 12288, 96


@checker("Activation bytes of one layer")
def check_layer_activations(answer) -> str:
    """Bytes one GPT-3 175B layer keeps (s = 2048, b = 1, h = 12288, a = 96; one device)."""
    got, sbh = as_number(answer), S * B * H
    if got == 34 * sbh:
        raise Wrong("that leaves out the attention scores.", "Softmax, its dropout mask and "
                    "the dropped-out probabilities are a·s² per sequence each.")
    if got == 2 * activation_bytes(S, B, H, A):
        raise Wrong("that counts 4 bytes per activation.", "Activations are 16-bit.")
    expect_bytes(got, activation_bytes(S, B, H, A), hint="sbh·(34 + 5as/h).")
    return f"{got / 2**30:.1f} GiB per layer: the a·s² term is {5 * A * S / H:.0f}·sbh of it."


@checker("What selective recomputation saves")
def check_selective_saving(answer) -> str:
    """Bytes per layer and device saved by selective recomputation with t = 8 and sequence
    parallelism (GPT-3 175B's layer, b = 1)."""
    got = as_number(answer)
    core = 5 * A * S * S * B
    if got == core:
        raise Wrong("that is the whole attention core, on one device.",
                    "With t = 8 each device holds its 12 of the 96 heads.")
    if got == activation_bytes(S, B, H, A, 8, True):
        raise Wrong("that is everything the layer keeps.", "Selective recomputation keeps "
                    "the 34·sbh/t and recomputes the rest.")
    want = activation_bytes(S, B, H, A, 8, True) - activation_bytes(S, B, H, A, 8, True,
                                                                      "selective")
    expect_bytes(got, want, hint="The term that grows with s²: 5as²b/t.")
    return f"{want / 2**30:.2f} GiB per layer: {want / activation_bytes(S, B, H, A, 8, True):.0%}."


@checker("The tensor-parallel group")
def check_tensor_group(answer) -> str:
    """Devices 0-15 on 2 nodes of 8 (node 0: 0-7); t = 8, d = 2: device 0's tensor group."""
    try:
        got = tuple(sorted(as_integer(i, "a device") for i in answer))
    except TypeError:
        raise Wrong("give the devices as a list of integers.") from None
    if got == tuple(range(0, 16, 2)):
        raise Wrong("that group spans both nodes.", "Tensor parallelism all-reduces twice per "
                    "layer: keep it on NVLink.")
    if got in ((0, 8), tuple(range(16))):
        raise Wrong("that group does not have t = 8 devices of one node." if got == (0, 8) else
                    "that is every device.", "t devices, all on the node of device 0.")
    if got != tuple(range(8)):
        raise Wrong(f"{list(got)} is not the group.", "Consecutive devices share a node.")
    return "the tensor axis is innermost: its 8 devices share NVLink; data runs across nodes."


@checker("The bubble of a 3D configuration")
def check_3d_bubble(answer) -> str:
    """Bubble fraction of GPT-3 175B, batch 1536, t = 8, p = 8, d = 16, b = 1 (1F1B)."""
    got = as_number(answer)
    m = 1536 // (16 * 1)
    if abs(got - 7 / (1536 + 7)) < 1e-9:
        raise Wrong("that uses every sequence of the batch as a microbatch of this pipeline.",
                    "Each of the d pipelines gets B/d sequences.")
    if abs(got - 7 / m) < 1e-9:
        raise Wrong("that is the bubble relative to the ideal time.",
                    "As a fraction of the whole step: (p−1)/(m+p−1).")
    expect_number(got, float(Fraction(7, m + 7)), hint="m = B/(d·b); then (p−1)/(m+p−1).")
    return f"m = {m}: 7/{m + 7} ≈ {7 / (m + 7):.1%}."


@checker("Activations of the first stage with full recomputation")
def check_first_stage(answer) -> str:
    """Activation bytes on the first stage: GPT-3 175B, t = 8, p = 16, b = 1, full
    recomputation, 1F1B with m ≥ p (no sequence parallelism)."""
    got = as_number(answer)
    per, layers, p, t = activation_bytes(S, B, H, A, 8, recompute="full"), 96 // 16, 16, 8
    want = per * layers * p
    if math.isclose(got, per * layers):
        raise Wrong("that is one microbatch.", "With 1F1B the first stage holds p in flight.")
    if math.isclose(got, want / t):
        raise Wrong("that splits the layer inputs over t.", "Without sequence parallelism "
                    "every tensor-parallel device keeps the whole input.")
    if math.isclose(got, per * layers * (p - 1)):
        raise Wrong("that is one microbatch short.", "1F1B's first stage runs p forward "
                    "passes before its first backward pass.")
    expect_bytes(got, want, hint="Count the layers of one stage and the microbatches it "
                  "holds at its peak.")
    return f"{want / 2**30:.1f} GiB: the same as one microbatch through all 96 layers."


DESIGN = ("GPT-3 175B", 256, 40e9)  # model, GPUs, bytes per GPU (A100 40GB)


def design_cluster() -> Cluster:
    """PTD-P's cluster (NVLink in a node of 8, InfiniBand between) with 40 GB A100s."""
    return Cluster("A100 40GB", CLUSTERS["A100 80GB (Selene)"].system, DESIGN[2])


@lru_cache(maxsize=1)
def _design_best() -> Plan:
    return best(DESIGN[0], design_cluster(), DESIGN[1])


@checker("Design: GPT-3 175B on 256 GPUs of 40 GB")
def check_3d_design(config) -> str:
    """``config``: dict(t, p, d, microbatch, zero_stage, recompute, sequence_parallel) for
    GPT-3 175B on 256 A100 40GB GPUs; it must fit in 40 GB and be within 3% of the fastest
    configuration that does."""
    if not isinstance(config, dict):
        raise Wrong("give a dict with keys t, p, d, microbatch, zero_stage, recompute, "
                    "sequence_parallel.")
    only_keys(config, ["t", "p", "d", "microbatch", "zero_stage", "recompute",
                       "sequence_parallel"], "your configuration")
    try:
        mine = plan(DESIGN[0], design_cluster(), **config)
    except (TpvizError, TypeError, ValueError) as e:
        raise Wrong(f"that configuration cannot be planned: {e}") from None
    if mine.devices != DESIGN[1]:
        raise Wrong(f"t·p·d = {mine.devices}, not {DESIGN[1]}.")
    if not mine.fits:
        raise Wrong(f"it needs {mine.total_memory / 1e9:.1f} GB per GPU, more than the "
                    "40 GB these GPUs have.", "The preset cluster has 80 GB: plan against "
                    "one with 40 GB, then recompute, shard the optimizer or split further.")
    fastest = _design_best()
    if mine.step_s > 1.03 * fastest.step_s:
        raise Wrong(f"it fits, but a step takes {mine.step_s:.1f} s; "
                    f"{fastest.step_s:.1f} s is possible.",
                    "Compare the bubble, the tensor all-reduces and recomputation.")
    return f"{mine.step_s:.1f} s per step, MFU {mine.mfu:.0%}, {mine.total_memory / 1e9:.1f} GB."


# --- build exercises on a (data 2 × tensor 4) mesh ---------------------------------------------
GRID = dict(shape=(2, 4), axes=("data", "tensor"), batch=8, hidden=8, ffn=32)


def _grid():
    import numpy as np

    from tpviz.devices import chosen_devices, make_mesh

    g = GRID
    mesh = make_mesh(g["shape"], g["axes"], devices=chosen_devices()[:8])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((g["batch"], g["hidden"])).astype(np.float32)
    w1 = (rng.standard_normal((g["hidden"], g["ffn"])) / 3).astype(np.float32)
    w2 = (rng.standard_normal((g["ffn"], g["hidden"])) / 6).astype(np.float32)
    return mesh, x, w1, w2


def _axes_of(found, mesh) -> list[tuple[str, tuple[str, ...] | None, int]]:
    from tpviz.core.compiled import mesh_axes

    return [(c.kind, mesh_axes(c, mesh), c.bytes) for c in found]


@checker("The MLP block on a data × tensor mesh")
def check_grid_mlp(fn) -> str:
    """``fn(x, w1, w2)`` per device inside ``shard_map`` on a (data 2 × tensor 4) mesh, with
    ``x[B/2, H]`` split over data, ``w1[H, F/4]`` by columns and ``w2[F/4, H]`` by rows over
    tensor: returns ``y = gelu(x·W1)·W2`` for its data shard, whole on every tensor device."""
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from tpviz.core import compiled
    from tpviz.core.exercises import call, expect_array

    mesh, x, w1, w2 = _grid()
    prog = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P("data", None), P(None, "tensor"),
                                                          P("tensor", None)),
                                 out_specs=P("data", None), check_vma=False))
    got = call(prog, x, w1, w2, what="your block inside shard_map")
    want = np.asarray(jax.nn.gelu(x @ w1) @ w2)
    hint = "Each tensor device holds a partial sum of y: add them over the devices that hold it."
    half = GRID["batch"] // 2
    both = np.tile(want[:half] + want[half:], (2, 1))  # summed over data as well
    if hasattr(got, "shape") and tuple(got.shape) == want.shape and np.allclose(
            np.asarray(got), both, rtol=1e-4, atol=1e-5):
        raise Wrong("each data shard's y has the other shard's added: the sum also ran over "
                    "the data axis.", hint)
    expect_array(got, want, what="y (all devices)", rtol=1e-4, atol=1e-5, hint=hint)
    found = _axes_of(compiled.collectives(prog, x, w1, w2), mesh)
    local = GRID["batch"] // 2 * GRID["hidden"] * 4
    if [(k, a) for k, a, _ in found] == [("all-reduce", ("tensor",))]:
        if found[0][2] != local:
            raise Wrong(f"right values, but the all-reduce moves {found[0][2]:,} bytes, not "
                        f"the {local:,} of this device's y.", hint)
        return f"one all-reduce of {local} bytes over tensor, nothing over data: Megatron's g."
    if any(k == "all-gather" for k, _, _ in found):
        raise Wrong(f"right values, but the program gathers ({found}): the weights stay split, "
                    "only the partial outputs are added.", hint)
    raise Wrong(f"right values, but the compiled collectives are {found} (kind, mesh axes, "
                "bytes): one all-reduce over tensor is all the block needs.", hint)


@checker("ZeRO's gradient reduce-scatter on the data axis")
def check_grid_reduce_scatter(fn) -> str:
    """``fn(g)`` per device on the (data 2 × tensor 4) mesh: ``g[H, F/4]`` is this device's
    gradient of its W1 shard from its own data shard; return the rows [H/2, F/4] it owns under
    ZeRO over data (data index 0 the first half), summed over the data replicas."""
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from tpviz.core import compiled
    from tpviz.core.exercises import call, expect_array

    mesh, _, w1, _ = _grid()
    grads = np.concatenate([w1, 2 * w1 + 1])  # [2H, F]: data replica r's gradient in block r
    prog = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("data", "tensor"),
                                 out_specs=P("data", "tensor"), check_vma=False))
    got = call(prog, grads, what="your reduction inside shard_map")
    want = w1 + (2 * w1 + 1)  # the sum over data, [H, F]; replica r keeps rows r·H/2 ...
    hint = ("Each data replica needs the sum of everyone's gradient, but only for the rows it "
            "updates.")
    if hasattr(got, "shape") and tuple(got.shape) == grads.shape:
        raise Wrong(f"every device returns all {GRID['hidden']} rows: under ZeRO a data "
                    "replica keeps only its half.", hint)
    expect_array(got, want, what="the reduced gradient shards (all devices)", rtol=1e-5,
                 atol=1e-5, hint=hint)
    collectives = compiled.collectives(prog, grads)
    found = _axes_of(collectives, mesh)
    if [(k, a) for k, a, _ in found] == [("reduce-scatter", ("data",))]:
        return (f"one reduce-scatter over data: each device sends "
                f"{collectives[0].sent_bytes:,.0f} bytes (ring model), half an all-reduce's.")
    if any(k == "all-reduce" for k, _, _ in found):
        raise Wrong("right values, but the program all-reduces the whole gradient and then "
                    "keeps half: twice the bytes of the plan.", hint)
    raise Wrong(f"right values, but the compiled collectives are {found} (kind, mesh axes, "
                "bytes).", hint)
