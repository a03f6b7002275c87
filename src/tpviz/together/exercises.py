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

# GPT-3 175B's layer: s, b, h, a (11.5)
S, B, H, A = 2048, 1, 12288, 96
# 11.1 and 11.2: another layer than the one the chapter computes (s, b, h, a)
LAYER = (4096, 1, 4096, 32)


@checker("Activation bytes of one layer")
def check_layer_activations(answer) -> str:
    """Bytes one layer keeps on one device without recomputation: s = 4096, b = 1, h = 4096,
    a = 32 (:data:`LAYER`)."""
    s, b, h, a = LAYER
    got, sbh = as_number(answer), s * b * h
    if got == 34 * sbh:
        raise Wrong("that leaves out the attention scores.", "Softmax, its dropout mask and "
                    "the dropped-out probabilities are a·s² per sequence each.")
    if got == 2 * activation_bytes(s, b, h, a):
        raise Wrong("that counts 4 bytes per activation.", "Activations are 16-bit.")
    expect_bytes(got, activation_bytes(s, b, h, a), hint="sbh·(34 + 5as/h).")
    return f"{got / 2**30:.2f} GiB per layer: the a·s² term is {5 * a * s / h:.0f}·sbh of it."


@checker("What selective recomputation saves")
def check_selective_saving(answer) -> str:
    """Bytes per layer and device saved by selective recomputation with t = 4 and sequence
    parallelism, for :data:`LAYER` (s = 4096, b = 1, h = 4096, a = 32)."""
    s, b, h, a = LAYER
    t = 4
    got = as_number(answer)
    core = 5 * a * s * s * b
    if got == core:
        raise Wrong("that is the whole attention core, on one device.",
                    f"With t = {t} each device holds {a // t} of the {a} heads.")
    if got == activation_bytes(s, b, h, a, t, True):
        raise Wrong("that is everything the layer keeps.", "Selective recomputation keeps "
                    "the 34·sbh/t and recomputes the rest.")
    if got == core / 8:
        raise Wrong("that divides by 8 devices; this layer runs on t = 4.")
    want = activation_bytes(s, b, h, a, t, True) - activation_bytes(s, b, h, a, t, True,
                                                                      "selective")
    expect_bytes(got, want, hint="The term that grows with s²: 5as²b/t.")
    return f"{want / 2**30:.2f} GiB per layer: {want / activation_bytes(s, b, h, a, t, True):.0%}."


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
    """Bubble fraction of GPT-3 175B, batch 1536, t = 8, p = 8, d = 32, b = 1 (1F1B)."""
    got = as_number(answer)
    m = 1536 // (32 * 1)
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
SPARE = 4e9  # bytes per GPU left out of the plan: the framework's workspace, fragmentation


def design_cluster(memory: float = DESIGN[2]) -> Cluster:
    """PTD-P's cluster (NVLink in a node of 8, InfiniBand between) with 40 GB A100s (or GPUs
    of ``memory`` bytes)."""
    return Cluster("A100 40GB", CLUSTERS["A100 80GB (Selene)"].system, memory)


@lru_cache(maxsize=1)
def design_fastest() -> Plan:
    """The fastest configuration whose plan leaves :data:`SPARE` bytes free per GPU."""
    return best(DESIGN[0], design_cluster(DESIGN[2] - SPARE), DESIGN[1])


@checker("Design: GPT-3 175B on 256 GPUs of 40 GB")
def check_3d_design(config) -> str:
    """``config``: dict(t, p, d, microbatch, zero_stage, recompute, sequence_parallel) for
    GPT-3 175B on 256 A100 40GB GPUs; its plan must leave 4 GB of each GPU free (at most 36 GB
    planned) and its step be within 3 % of the fastest configuration that does. Several
    configurations are admissible; the check names the reason one is not."""
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
    limit = (DESIGN[2] - SPARE) / 1e9
    if not mine.fits:
        raise Wrong(f"it needs {mine.total_memory / 1e9:.1f} GB per GPU, more than the "
                    "40 GB these GPUs have.", "The preset cluster has 80 GB: plan against "
                    "one with 40 GB, then recompute, shard the optimizer or split further.")
    if mine.total_memory > DESIGN[2] - SPARE:
        raise Wrong(f"it plans {mine.total_memory / 1e9:.1f} GB per GPU: it fits in 40 GB, but "
                    f"leaves less than the 4 GB the plan does not count (at most {limit:g} GB "
                    "planned).", "What does the planner's memory leave out, and how would you "
                    "keep room for it?")
    fastest = design_fastest()
    if mine.step_s > 1.03 * fastest.step_s:
        raise Wrong(f"it leaves the room, but a step takes {mine.step_s:.1f} s; "
                    f"{fastest.step_s:.1f} s is possible within {limit:g} GB.",
                    "Compare the bubble, the tensor all-reduces and recomputation.")
    return (f"{mine.total_memory / 1e9:.1f} GB planned of 40 (4 GB spare), {mine.step_s:.1f} s "
            f"per step, within 3 % of the fastest such configuration ({fastest.step_s:.1f} s); "
            f"MFU {mine.mfu:.0%}.")
