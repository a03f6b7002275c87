"""Serving a model, as plans: the KV cache, and prefill and decode on chapter 2's roofline.

Notation (``book/notation.md``): L layers, H hidden, n_h query heads and n_kv key/value heads of
width d_h, F the MLP's width, B sequences decoded together, S tokens in each sequence's cache
(the context), N chips, R peak FLOP/s and W_hbm HBM bandwidth of one chip.

- **KV cache** (austin2025scaling, "All About Transformer Inference"): keys and values of every
  layer, ``2 · L · n_kv · d_h`` values per token. Multi-head attention has n_kv = n_h,
  grouped-query attention (GQA) fewer, multi-query attention (MQA) one.
- **A decode step** makes one token for each of B sequences; the model is split over all N
  chips (weights and cache sharded, activations replicated: tensor parallelism). Its matmuls do
  2 FLOPs per weight per sequence and read every weight once: on the roofline
  (:func:`tpviz.core.hardware.roofline`) they turn compute-bound when
  ``B > R · bytes per weight / (2 W_hbm)`` (:func:`critical_batch`: ≈ 240 on a v5e in bf16,
  half that with int8 weights and bf16 FLOPs). Attention reads each sequence's cache for
  ``4 · S · n_h · d_h`` FLOPs per layer: always memory-bound. Each layer ends its attention and
  its MLP with an all-reduce of the ``[B, H]`` activations, priced by :mod:`tpviz.core.hardware`
  on the slice or GPU cluster (latency included). The next matmul needs its result, so the
  step adds them: ``T = roofline(matmuls) + roofline(attention) + T_comm``.
- **Prefill** processes T prompt tokens at once: compute-bound; with collective matmuls the
  all-reduces of ``[T, H]`` overlap the matmuls, so ``T = max(compute, memory, comm)``.

A mixture of experts (E experts, k per token) reads only the experts its B·k choices touch,
``E (1 - (1 - k/E)^B)`` per layer with uniform routing, and splits them over the chips (expert
parallelism): its MLP's all-reduce becomes an all-to-all out and one back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpviz.core import hardware as hw
from tpviz.core import validate
from tpviz.core.kinds import Amount, Any_, Index, OneOf
from tpviz.errors import ArgumentError, ArgumentTypeError

#: bytes per value of the weights and caches a server keeps (int4: two values per byte)
BYTES = {"bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


def model_of(model: Any_) -> hw.Model:
    """A :class:`tpviz.core.hardware.Model`, or the one ``MODELS`` names."""
    if isinstance(model, hw.Model):
        return model
    if not isinstance(model, str):
        raise ArgumentTypeError(f"model must be a tpviz.core.hardware.Model or one of the names "
                                f"in MODELS, got {type(model).__name__} {model!r}.")
    return hw.MODELS[validate.choice("model", model, hw.MODELS)]


def bytes_of(dtype: str, name: str = "dtype") -> float:
    """Bytes per value of ``dtype`` ("bf16", "fp8", "int8" or "int4")."""
    return BYTES[validate.choice(name, dtype, BYTES)]


def kv_cache_bytes(model: Any_, tokens: int, dtype: str = "bf16") -> Amount:
    """Bytes of the keys and values of ``tokens`` tokens, every layer:
    ``2 · L · n_kv · d_h · bytes · tokens``.

    Example:
        >>> kv_cache_bytes("LLaMA-3 70B", 1)  # 2 · 80 layers · 8 KV heads · 128 · 2 bytes
        327680.0
    """
    m = model_of(model)
    tokens = validate.integer("tokens", tokens, minimum=0, maximum=10**12)
    return 2 * m.layers * m.K * m.d * bytes_of(dtype) * tokens


def weight_bytes(model: Any_, dtype: str = "bf16") -> Amount:
    """Bytes of every parameter (what the chips must hold)."""
    return model_of(model).params * bytes_of(dtype)


def experts_touched(experts: int, top_k: int, batch: int) -> float:
    """Expected experts of one layer that B tokens choose, each picking k of E uniformly:
    ``E (1 - (1 - k/E)^B)`` (1 for a dense model)."""
    experts = validate.integer("experts", experts)
    top_k = validate.integer("top_k", top_k, maximum=experts)
    batch = validate.integer("batch", batch, maximum=10**9)
    return experts * (1 - (1 - top_k / experts) ** batch)


def read_params(m: hw.Model, batch: int) -> float:
    """Parameters one decode step reads: every layer (the experts its batch touches), the final
    norm and the output matrix V·H. The input embedding is a lookup of B rows, left out."""
    touched = experts_touched(m.experts, m.top_k, batch) if m.experts > 1 else 1
    layer = m.layer_params - (m.experts - touched) * m.mlp_params
    return m.layers * layer + m.norm_params + m.vocab * m.hidden


def matmul_params(m: hw.Model) -> float:
    """Weights one token multiplies by: every layer's (k experts) and the output matrix."""
    return m.layers * m.layer_matmul_params + m.vocab * m.hidden


# --- the machine ----------------------------------------------------------------------------

def slice_shape(system: OneOf(lambda: hw.TPUS), chips: int) -> tuple[int, ...]:
    """The TPU slice of ``chips`` chips (a power of two): the sizes doubled axis by axis, the
    largest first, as Google's topologies go: v5e 2x2, 4x2, 4x4, 8x4, …, 16x16; v5p 2x2x1,
    2x2x2, 4x2x2, …, 4x4x4 (google2024tpuv5e, google2024tpuv5p)."""
    chips = check_chips(system, chips)  # a power of two, up to the pod
    dims = len(hw.TPUS[system].pod)
    shape = [1] * dims
    k = int(math.log2(chips))
    for i in range(k):
        shape[i % dims] *= 2
    return tuple(sorted(shape, reverse=True))


def check_chips(system: str, chips: Any_) -> int:
    """``chips`` as an int a ``system`` comes in: a power of two up to the pod (TPU); up to 8,
    or whole nodes of 8 (GPU).

    Raises:
        ArgumentError: another count, naming the ones that exist.
    """
    chips = validate.integer("chips", chips, maximum=2**16)
    if system in hw.TPUS:
        pod = math.prod(hw.TPUS[system].pod)
        if chips & (chips - 1) or chips > pod:
            raise ArgumentError(f"chips = {chips}: a {system} slice has a power of two of "
                                f"chips, at most {pod:,} (e.g. 4, 8, 16).")
    elif chips > 8 and chips % 8:
        raise ArgumentError(f"chips = {chips}: {system} GPUs come in nodes of 8; use up to 8 or "
                            "a multiple of 8.")
    return chips


def network(system: str, chips: int) -> hw.TpuSlice | hw.GpuCluster:
    """The slice (TPU) or cluster (GPU) of ``chips`` chips whose collectives price a step."""
    system = validate.choice("system", system, hw.SYSTEMS)
    chips = check_chips(system, chips)
    if system in hw.TPUS:
        return hw.tpu(system, slice_shape(system, chips))
    return hw.gpu_cluster(system, chips)


def critical_batch(system: str, dtype: str = "bf16", compute: str = "bf16") -> float:
    """B_crit: sequences per decode step from which the matmuls are compute-bound,
    ``R(compute) · bytes per weight / (2 W_hbm)``: 2·B FLOPs per weight read."""
    chip = hw.chip_of(validate.choice("system", system, hw.SYSTEMS))
    return chip.peak(compute) * bytes_of(dtype) / (2 * chip.hbm_bandwidth)


# --- a step ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One decode step (one new token per sequence) or one prefill, on N chips.

    Attributes: ``flops``, ``weight_bytes`` (weights read), ``kv_bytes`` (cache read, or
    written by a prefill), all chips together; ``matmul`` and ``attention``, their rooflines
    on one chip; ``comm_s`` (the all-reduces or all-to-alls, latency included); ``held_bytes``
    (weights and caches one chip holds) and ``hbm_bytes`` (its HBM); ``overlapped`` (prefill:
    the three terms overlap)."""

    kind: str
    model: str
    system: str
    chips: int
    batch: int
    context: int
    flops: float
    weight_bytes: float
    kv_bytes: float
    matmul: hw.Roofline
    attention: hw.Roofline
    comm_s: float
    held_bytes: float
    hbm_bytes: float
    overlapped: bool = False

    @property
    def compute_s(self) -> float:
        return self.matmul.compute_s + self.attention.compute_s

    @property
    def memory_s(self) -> float:
        return self.matmul.memory_s + self.attention.memory_s

    @property
    def seconds(self) -> float:
        """Per generated token (decode) or for the whole prompt (prefill)."""
        if self.overlapped:
            return max(self.compute_s, self.memory_s, self.comm_s)
        return self.matmul.seconds + self.attention.seconds + self.comm_s

    @property
    def bound(self) -> str:
        """``"memory"``, ``"compute"`` or ``"communication"``: the largest of the three."""
        terms = {"memory": self.memory_s, "compute": self.compute_s,
                 "communication": self.comm_s}
        return max(terms, key=terms.get)

    @property
    def tokens_per_s(self) -> float:
        """Tokens the step makes per second, all sequences (prefill: prompt tokens)."""
        return (self.batch if self.kind == "decode" else self.context) / self.seconds

    @property
    def per_chip(self) -> float:
        """Tokens per second per chip."""
        return self.tokens_per_s / self.chips

    @property
    def fits(self) -> bool:
        return self.held_bytes <= self.hbm_bytes

    def cost_per_million(self, chip_hour: float) -> float:
        """Dollars per million tokens at ``chip_hour`` dollars per chip and hour."""
        chip_hour = validate.number("chip_hour", chip_hour, positive=True)
        return self.chips * chip_hour / 3600 / self.tokens_per_s * 1e6


def _collective_s(net, kind: str, nbytes: float) -> float:
    return net.price(kind, nbytes).seconds


def _comm_s(m: hw.Model, net, tokens: float, act: float) -> float:
    """Per step: an all-reduce of [tokens, H] after attention, and after a dense MLP another,
    or an MoE's all-to-all out and back of its tokens·k rows."""
    rows = tokens * m.hidden * act
    mlp = (2 * _collective_s(net, "all-to-all", rows * m.top_k) if m.experts > 1
           else _collective_s(net, "all-reduce", rows))
    return m.layers * (_collective_s(net, "all-reduce", rows) + mlp)


def _inputs(model, system, chips, dtype, kv_dtype, compute):
    m = model_of(model)
    system = validate.choice("system", system, hw.SYSTEMS)
    net = network(system, chips)
    w, kv = bytes_of(dtype), kv_dtype or dtype
    bytes_of(kv, "kv_dtype")
    chip = hw.chip_of(system)
    chip.peak(compute)  # refuses a compute dtype the chip lacks
    act = 1 if BYTES.get(compute, 2) < 2 else 2  # activations in the compute type
    n = net.gpus if isinstance(net, hw.GpuCluster) else math.prod(net.mesh_shape)
    return m, system, net, n, w, kv, chip, act


def decode(model: Any_, system: str, chips: int, batch: int, context: Index, dtype: str = "bf16", *,
           kv_dtype: str | None = None, compute: str = "bf16", queries: int = 1) -> Step:
    """One decode step of ``batch`` sequences with ``context`` tokens cached each, on ``chips``
    chips of ``system`` (a key of ``core.hardware.SYSTEMS``), weights in ``dtype``, the cache
    in ``kv_dtype`` (default: ``dtype``), FLOPs in ``compute``. ``queries``: new tokens per
    sequence (1; γ + 1 when a target model verifies γ drafted tokens).

    Raises:
        ArgumentError: an unknown model, system or dtype, or a chip count the system lacks.
    """
    m, system, net, n, w, kv, chip, act = _inputs(model, system, chips, dtype, kv_dtype,
                                                  compute)
    b = validate.integer("batch", batch, maximum=10**7)
    s = validate.integer("context", context, minimum=0, maximum=10**8)
    q = validate.integer("queries", queries, maximum=1024)
    weights = read_params(m, b * q) * w
    cache = b * kv_cache_bytes(m, s, kv)
    attn = 4 * b * q * s * m.heads * m.d * m.layers
    dense = 2 * b * q * matmul_params(m)
    held = (m.params * w + b * kv_cache_bytes(m, s + q, kv)) / n
    return Step("decode", m.name, system, n, b, s, dense + attn, weights, cache,
                hw.roofline(chip, dense / n, weights / n, compute),
                hw.roofline(chip, attn / n, cache / n, compute),
                _comm_s(m, net, b * q, act) if n > 1 else 0.0, held, chip.hbm_bytes)


def prefill(model: Any_, system: str, chips: int, tokens: int, dtype: str = "bf16", *,
            kv_dtype: str | None = None, compute: str = "bf16") -> Step:
    """Processing a prompt of ``tokens`` tokens (one sequence) and writing its cache: causal
    attention, ``2 · T² · n_h · d_h · L`` FLOPs; the all-reduces of ``[T, H]`` overlap the
    matmuls (collective matmuls), so the step takes the largest of the three terms."""
    m, system, net, n, w, kv, chip, act = _inputs(model, system, chips, dtype, kv_dtype,
                                                  compute)
    t = validate.integer("tokens", tokens, maximum=10**7)
    weights = read_params(m, t) * w
    cache = kv_cache_bytes(m, t, kv)
    attn = 2 * t * t * m.heads * m.d * m.layers
    dense = 2 * t * matmul_params(m)
    return Step("prefill", m.name, system, n, 1, t, dense + attn, weights, cache,
                hw.roofline(chip, dense / n, weights / n, compute),
                hw.roofline(chip, attn / n, cache / n, compute),
                _comm_s(m, net, t, act) if n > 1 else 0.0,
                (m.params * w + cache) / n, chip.hbm_bytes, overlapped=True)
