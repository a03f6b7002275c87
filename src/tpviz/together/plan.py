"""3D parallelism as a plan: memory per device, step time and MFU of (t, p, d, b, ZeRO, recompute).

The mesh is (data d, pipeline p, tensor t) with the tensor axis innermost: a tensor group is t
consecutive devices (inside one node when t ≤ GPUs per node), pipeline neighbours are t apart,
data-parallel replicas t·p apart (PTD-P's placement, Narayanan et al. 2021). Per step, with
global batch B sequences, microbatch b and m = B/(d·b) microbatches per pipeline (1F1B):

- memory of the first stage (it holds the most): parameters, gradients and optimizer state of
  its L/p layers and the embedding, split t ways and then by ZeRO over d
  (:func:`tpviz.zero.plan.memory`); activations of min(p, m) microbatches in flight, each
  L/p layers of :func:`activation_bytes`; buffers: the two pipeline send/receive buffers and
  the working set of recomputing one layer;
- time: m + p - 1 slots of one microbatch's forward, backward and recomputation on one stage
  plus its tensor-parallel all-reduces and pipeline sends (exposed, as in Megatron-LM), so the
  bubble is (p-1)/(m+p-1) of it (:func:`tpviz.pipeline.bubble_formula`), then the data axis's
  gradient reduction after the flush (exposed);
- MFU: model FLOPs (:meth:`tpviz.core.hardware.Model.flops`: 6 per weight per token and the
  attention scores, without recomputation; for PTD-P's GPT models 72·B·s·L·h²·(1 + s/(6h)
  + V/(12·L·h)), its eq. 3 without the recomputed forward pass, whose 96·(… + V/(16·L·h))
  counts the layers 4 times but the output layer 3 times) over (step time × devices × peak
  FLOP/s).

Context parallelism (``context`` = c > 1, chapter 9): ring attention splits each sequence over c
devices between the tensor and pipeline axes (stride t). Each device keeps the activations and
does the work of s/c tokens, except that without recomputation it keeps the scores of its s/c
queries against all s keys (every block's), c times Korthikanti's term at s/c tokens. The keys
and values go round the ring, c - 1 permutes per layer and forward pass (the recomputed one
included); the backward sends the gradients of the keys and values, c - 1 permutes when every
block's scores were kept (no recomputation), else (Liu et al.'s backward, which recomputes each
block) the keys and values again beside their gradients, 2c - 1 permutes. Of each permute only
what one block's attention does not hide is exposed; the c devices hold the same weights, so
the gradients (and ZeRO's sharding) span d·c devices.

Compute runs at ``efficiency`` × peak, an assumption (large bf16 matmuls reach about that); the
model has no penalty for small matmuls, no overlap of communication and no interleaving.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from tpviz.core import validate
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.cost import SYSTEMS, System
from tpviz.core.hardware.models import MODELS as HW_MODELS
from tpviz.core.hardware.models import Model
from tpviz.core.kinds import Devices, OneOf, Positive
from tpviz.errors import ArgumentError
from tpviz.pipeline import bubble_formula
from tpviz.together.memory import RECOMPUTE, activation_bytes
from tpviz.zero import plan as zero_plan

AXES = ("data", "pipeline", "tensor")  # outermost to innermost
CATEGORIES = ("params", "grads", "optimizer", "activations", "buffers")


# GPT-3 sizes (Brown et al. 2020, Table 2.1; 13B's width 5140 there is 40 heads × 128 = 5120) and
# PTD-P's Table 1 models (Narayanan et al. 2021), vocabulary 51,200, sequence 2048; GPT-3 175B,
# LLaMA-2/3 and Mixtral are core.hardware's presets (one spec of each model)
MODELS = {m.name: m for m in (
    Model("GPT-3 2.7B", 32, 2560, 32, batch=512),
    Model("GPT-3 6.7B", 32, 4096, 32, batch=1024),
    Model("GPT-3 13B", 40, 5120, 40, batch=1024),
    HW_MODELS["GPT-3 175B"],
    Model("PTD-P 145.6B", 80, 12288, 96, batch=2304),
    Model("PTD-P 1T", 128, 25600, 160, batch=3072),
    *(m for name, m in HW_MODELS.items() if name != "GPT-3 175B"),
)}


@dataclass(frozen=True)
class Cluster:
    """GPUs of ``memory`` bytes each, linked as ``system`` says (NVLink inside a node of
    ``system.node`` GPUs, ``system.between_nodes`` bytes/s per GPU between nodes)."""

    name: str
    system: System
    memory: float


# Megatron-LM runs NCCL, whose all-reduce across nodes is one flat ring over every GPU of the
# group (its channels spread over the NICs): the "ring" algorithm of core.hardware
CLUSTERS = {c.name: c for c in (
    Cluster("A100 80GB (Selene)", replace(SYSTEMS["A100 cluster (NVLink + InfiniBand)"],
                                          algorithm="ring"), 80e9),
    Cluster("H100 80GB", replace(SYSTEMS["H100 cluster (NVLink + InfiniBand)"],
                                 algorithm="ring"), 80e9),
)}


@dataclass(frozen=True)
class Plan:
    """Memory per device (bytes), time per step (seconds) and MFU of one configuration."""

    model: Model
    cluster: Cluster
    tensor: int
    pipeline: int
    data: int
    microbatch: int
    zero_stage: int
    recompute: str
    sequence_parallel: bool
    memory: dict[str, float]
    compute_s: float
    comm_s: dict[str, float]
    bubble_s: float
    collectives: dict[str, Collectives] = field(repr=False)
    context: int = 1  # c: context-parallel (ring attention) devices per sequence

    @property
    def devices(self) -> int:
        return self.tensor * self.pipeline * self.data * self.context

    @property
    def microbatches(self) -> int:
        return self.model.batch // (self.data * self.microbatch)

    @property
    def total_memory(self) -> float:
        return sum(self.memory.values())

    @property
    def fits(self) -> bool:
        return self.total_memory <= self.cluster.memory

    @property
    def step_s(self) -> float:
        return self.compute_s + sum(self.comm_s.values()) + self.bubble_s

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: model FLOPs / (step time · devices · peak)."""
        peak = self.cluster.system.flops
        return self.model.flops() / (self.step_s * self.devices * peak)

    def label(self) -> str:
        sp = "+SP" if self.sequence_parallel else ""
        cp = f" c={self.context}" if self.context > 1 else ""
        return (f"t={self.tensor}{sp}{cp} p={self.pipeline} d={self.data} b={self.microbatch} "
                f"ZeRO-{self.zero_stage} recompute={self.recompute}")


def per_node(cluster: Cluster, stride: int, size: int) -> int | None:
    """GPUs of one group of ``size`` GPUs ``stride`` apart inside one node (None: no nodes)."""
    node = cluster.system.node
    if not node:
        return None
    return min(size, max(1, node // stride))


def seconds(cluster: Cluster, collectives: Collectives, stride: int) -> float:
    """Seconds of ``collectives`` over groups of GPUs ``stride`` apart, each priced by
    :mod:`tpviz.core.hardware` (NVLink inside a node, the NICs of the group's GPUs between)."""
    counts = Counter(collectives)  # the same collective repeats per layer: price it once
    return sum(k * cluster.system.price(c, per_node(cluster, stride, c.group_size)).seconds
               for c, k in counts.items())


def plan(model: Model | str, cluster: Cluster | str, t: Devices, p: Devices, d: Devices,
         microbatch: int = 1, zero_stage: OneOf((0, 1, 2, 3)) = 1, recompute: str = "full",
         sequence_parallel: bool = False, efficiency: Positive = 0.7, context: Devices = 1
         ) -> Plan:
    """Memory, time and MFU of ``model`` on t·p·d GPUs of ``cluster`` (see the module text).

    Raises:
        ArgumentError: a size that does not divide (heads by t, layers by p, the batch by d·b).
    """
    model = MODELS[validate.choice("model", model, MODELS)] if isinstance(model, str) else model
    cluster = (CLUSTERS[validate.choice("cluster", cluster, CLUSTERS)]
               if isinstance(cluster, str) else cluster)
    validate.instance("model", model, Model, "a Model or one of the names in MODELS")
    validate.instance("cluster", cluster, Cluster, "a Cluster or one of the names in CLUSTERS")
    t, p, d, b = (validate.integer(n, v) for n, v in (("t", t), ("p", p), ("d", d),
                                                        ("microbatch", microbatch)))
    recompute = validate.choice("recompute", recompute, RECOMPUTE)
    c = validate.integer("context", context)
    eff = validate.number("efficiency", efficiency, positive=True)
    if eff > 1:
        raise ArgumentError(f"efficiency={eff:g} is the fraction of peak FLOP/s reached: at most "
                            "1 (large bf16 matmuls reach about 0.7).")
    for what, whole, part in (("heads", model.heads, t), ("layers", model.layers, p),
                              ("batch", model.batch, d * b), ("seq", model.seq, c)):
        if whole % part:
            raise ArgumentError(f"{what} = {whole} is not divisible by {part}; choose "
                                         f"sizes that divide it.")
    s, h, L, m = model.seq // c, model.hidden, model.layers // p, model.batch // (d * b)
    embedding = model.vocab * h + (model.seq * h if model.learned_positions else 0)  # 1st stage
    stage_params = (L * model.layer_params + embedding) / t
    states = zero_plan.memory(stage_params, d * c, zero_stage)
    act = activation_bytes(s, b, h, model.heads, t, sequence_parallel, recompute)
    if recompute == "none":  # every block's scores: s/c queries against all c·(s/c) keys
        act += (c - 1) * (act - activation_bytes(s, b, h, model.heads, t, sequence_parallel,
                                                 "selective"))
    working = (activation_bytes(s, b, h, model.heads, t, sequence_parallel) - act
               if recompute != "none" else 0.0)
    memory = {"params": states.params, "grads": states.grads, "optimizer": states.optimizer,
              "activations": act * L * min(p, m),
              "buffers": working + (2 * 2 * s * b * h if p > 1 else 0.0)}
    # one microbatch on one stage: forward 1, backward 2, recomputed forward (full) 1
    # matmuls + attention scores (with context parallelism: s/c queries against all c·s/c keys)
    layer_fwd = (2 * b * s * model.layer_matmul_params
                 + 4 * b * s * s * model.heads * model.d * c)
    extra = {"none": 0.0, "selective": 4 * b * s * s * h * c, "full": layer_fwd}[recompute]
    logits = 3 * 2 * b * s * h * model.vocab / p  # the output layer, spread over the stages
    slot_compute = (L * (3 * layer_fwd + extra) + logits) / t / (cluster.system.flops * eff)
    activation = 2 * s * b * h  # bf16 [b, s, h]
    passes = 3 if recompute == "full" else 2  # forward, backward (and the recomputed forward)
    tp = Collectives([Collective("all-reduce", activation, t, axes=("tensor",),
                                 what="activations (g forward, f backward)")] * (2 * L * passes)
                     if t > 1 else [])
    pp = Collectives([Collective("collective-permute", activation, p, axes=("pipeline",),
                                 what="activations forward, their gradients backward")] * 2
                     if p > 1 else [])
    tp_s, pp_s = seconds(cluster, tp, 1), seconds(cluster, pp, t * c)
    cp, cp_s = _context(cluster, s, b, h, t, c, L, passes - 1, recompute != "none", eff)
    dp = _data_collectives(stage_params, d * c, zero_stage, m)
    dp_s = seconds(cluster, dp, t * p if c == 1 else t)  # with CP: d·c replicas, t apart
    fraction, _ = bubble_formula("1f1b", p, m)
    busy = m * (slot_compute + tp_s + pp_s + cp_s)
    comm_s = {"tensor": m * tp_s, "pipeline": m * pp_s, "data": dp_s}
    collectives = {"tensor": tp, "pipeline": pp, "data": dp}
    if c > 1:
        comm_s["context"], collectives["context"] = m * cp_s, cp
    return Plan(model, cluster, t, p, d, b, zero_stage, recompute, sequence_parallel, memory,
                compute_s=m * slot_compute, comm_s=comm_s,
                bubble_s=busy * fraction / (1 - fraction), collectives=collectives, context=c)


def _context(cluster: Cluster, s: int, b: int, h: int, t: int, c: int, layers: int,
             forwards: int, recompute: bool, efficiency: float) -> tuple[Collectives, float]:
    """Ring attention over c devices (stride t), per layer: c - 1 permutes of the keys and
    values [2, s/c, b, h/t] (bf16) per forward pass (``forwards``: 1, or 2 with the recomputed
    one); backward, 2c - 1 (``recompute``: blocks and their gradients) or c - 1 (gradients
    only). Exposed: what one block's attention (4·b·(s/c)²·h/t FLOPs, as the compute counts
    it: no causal saving) does not hide, per permute."""
    if c == 1:
        return Collectives(), 0.0
    one = Collective("collective-permute", 2 * 2 * s * b * h // t, c, axes=("context",),
                     what="keys and values (or their gradients) round the ring")
    block_s = 4 * b * s * s * h / t / (cluster.system.flops * efficiency)
    step_s = max(0.0, seconds(cluster, Collectives([one]), t) - block_s)
    count = layers * (forwards * (c - 1) + (2 * c - 1 if recompute else c - 1))
    return Collectives([one] * count), step_s * count


def _data_collectives(params: float, d: int, stage: int, m: int) -> Collectives:
    """The data axis per step. Stages 0-1: the gradients reduced once after the flush. With
    microbatches, stage 2 reduce-scatters each microbatch's gradients (they are not kept whole)
    and stage 3 also all-gathers the parameters twice per microbatch."""
    if d == 1:
        return Collectives()
    one = [Collective(c.kind, c.bytes, c.group_size, axes=("data",), what=c.what)
           for c in zero_plan.collectives(params, d, stage)]
    if stage <= 1:
        return Collectives(one)
    per_microbatch = [c for c in one if c.kind == "reduce-scatter" or stage == 3]
    rest = [c for c in one if c not in per_microbatch]
    return Collectives(per_microbatch * m + rest)
