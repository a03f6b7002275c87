"""A mixture-of-experts layer as a plan: capacity, routing, drops, shapes and all-to-alls.

The layer (GShard, Switch): a router ``W_r[H, E]`` gives each token ``x`` gate logits
``x W_r``; the token goes to its top-k experts, and the layer returns
``y = x + Σ_j g_j · FFN_{e_j}(x)`` over the kept choices ``e_j`` (a dropped choice adds nothing:
the token passes through the residual). The T tokens of a step are split into groups of
``T_g = T/N`` tokens, one group per device (GShard's G groups of S tokens; S is the sequence
length in this book); each expert takes at most

    C = ⌈k · T_g · c_f / E⌉ tokens of a group (c_f = the capacity factor).

Choices beyond C are dropped, in GShard's order: all first choices before any second choice,
and within one choice by token position. With experts split over N devices (E/N each), a device
packs its group into a buffer ``[E, C, H]`` and an all-to-all sends expert e's rows to the
device that holds e (dispatch); a second all-to-all brings the results back (combine). The
backward pass repeats both. Everything here is NumPy: no devices, no JAX tracing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from tpviz.core import cost, layout
from tpviz.core import validate as check
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import HELD, ArrayOf, Devices, Dtype, Index, Size
from tpviz.core.rules import Real
from tpviz.errors import ArgumentError, ShardingError

AXIS = "expert"
ORDERS = ("before", "after")  # softmax before or after top-k
Factor = Annotated[float, Real(0.0, 1000.0, positive=True)]  # a capacity factor > 0


def validate(tokens: int, experts: int, top_k: int, capacity_factor: float,
             devices: int = 1) -> None:
    """Raise a clear error for sizes that do not make an expert-parallel MoE layer.

    Raises:
        ArgumentTypeError: a size that is not an integer, or c_f not a number.
        ArgumentError: a size that is not positive, k > E, or c_f <= 0.
        ShardingError: E or the tokens not divisible by the devices.
    """
    for name, value in (("tokens", tokens), ("experts", experts), ("top_k", top_k),
                        ("devices", devices)):
        check.integer(name, value)
    if top_k > experts:
        raise ArgumentError(f"top_k={top_k} is more than the {experts} experts: a token cannot "
                            f"pick more experts than there are. Use top_k <= {experts}.")
    check.number("capacity_factor", capacity_factor, positive=True,
                 fix="1.0 = exactly the average load, 1.25 is common.")
    if experts % devices:
        raise ShardingError(f"{experts} experts do not split over {devices} devices: each device "
                            f"holds E/N whole experts. Use a number of experts divisible by "
                            f"{devices}.")
    if tokens % devices:
        raise ShardingError(f"{tokens} tokens do not split over {devices} devices (one group of "
                            f"T/N tokens each). Use a multiple of {devices}.")


def _logits(logits) -> np.ndarray:
    """``logits`` as a 2-D array ``[T, E]``."""
    logits = np.asarray(logits)
    if logits.ndim != 2:
        raise ArgumentError(f"logits must be a 2-D array [tokens, experts], got shape "
                            f"{logits.shape}. For one token use logits[None, :].")
    return logits


def _groups(tokens: int, groups) -> int:
    groups = check.integer("groups", groups)
    if tokens % groups:
        raise ShardingError(f"{tokens} tokens do not split into {groups} groups.")
    return groups


def capacity(tokens: int, experts: int, top_k: int, capacity_factor: Factor) -> int:
    """C = ⌈k · T_g · c_f / E⌉: the most tokens one expert takes from a group of ``tokens``
    (T_g).

    Example:
        >>> capacity(tokens=64, experts=8, top_k=2, capacity_factor=1.25)
        20
    """
    validate(tokens, experts, top_k, capacity_factor)
    return math.ceil(round(top_k * tokens * capacity_factor / experts, 9))


# --- routing (NumPy) ---------------------------------------------------------------------------

def softmax(logits: ArrayOf("... E", finite=True), axis: int = -1) -> np.ndarray:
    z = np.asarray(logits, np.float64)
    if not -z.ndim <= axis < z.ndim:
        raise ArgumentError(f"axis = {axis} is not an axis of logits (shape {z.shape}).")
    z = np.exp(z - z.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


@dataclass(frozen=True)
class Routing:
    """Where each token goes: ``experts[t, j]`` is token t's j-th choice, ``gates[t, j]`` its
    weight, ``keep[t, j]`` whether it fits under the capacity, ``probs[t]`` the router's softmax
    over all E experts."""

    experts: ArrayOf("T K", integer=True)  # int [T, k]
    gates: ArrayOf("T K")  # float [T, k]
    keep: ArrayOf("T K")  # bool [T, k]
    probs: ArrayOf("T E")  # float [T, E]
    capacity: int  # per expert and group
    groups: int

    @property
    def dropped(self) -> float:
        """Fraction of the T·k token-choices dropped."""
        return float(1 - self.keep.mean())

    def load(self) -> np.ndarray:
        """Choices routed to each expert (before dropping), summed over the groups."""
        return np.bincount(self.experts.ravel(), minlength=self.probs.shape[1])

    def kept(self) -> np.ndarray:
        """Choices each expert takes (after dropping), summed over the groups."""
        return np.bincount(self.experts[self.keep], minlength=self.probs.shape[1])


def top_k(logits: ArrayOf("T E", finite=True), k: int, order: str = "before",
          probs: ArrayOf("T E") | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each token's k largest logits (first = largest) and their gates.

    ``order="before"``: softmax over all E experts, then keep the k largest probabilities (Switch,
    GShard before its renormalisation): the gates sum to less than 1. ``"after"``: keep the k
    largest logits, then softmax over those k (Shazeer et al.'s Softmax(KeepTopK(H(x)))): the
    gates sum to 1, and equal the "before" gates divided by their sum. ``probs``: the softmax
    of the logits, if already computed.
    """
    if order not in ORDERS:
        raise ArgumentError(f"order={order!r}: use 'before' (softmax, then top-k) or 'after'.")
    logits = _logits(logits)
    validate(logits.shape[0], logits.shape[1], k, 1.0)
    part = np.argpartition(-logits, k - 1, axis=1)[:, :k] if k < logits.shape[1] else \
        np.broadcast_to(np.arange(k), logits.shape).copy()
    experts = np.take_along_axis(part, np.argsort(-np.take_along_axis(logits, part, axis=1),
                                                  axis=1, kind="stable"), axis=1)
    if order == "before":
        gates = np.take_along_axis(softmax(logits) if probs is None else probs, experts, axis=1)
    else:
        gates = softmax(np.take_along_axis(logits, experts, axis=1))
    return experts, gates


def keep(experts: ArrayOf(2, integer=True), num_experts: Size(2**16, HELD), capacity: Index,
         groups: int = 1) -> np.ndarray:
    """Which choices fit: per group, expert e takes choices in GShard's order (every first
    choice by token position, then every second choice, ...) until it holds ``capacity``."""
    experts = np.asarray(experts)
    if experts.ndim != 2:
        raise ArgumentError(f"experts must be a 2-D array [tokens, k], got shape "
                            f"{experts.shape}.")
    t, k = experts.shape
    num_experts = check.integer("num_experts", num_experts)
    if experts.size and not 0 <= experts.min() <= experts.max() < num_experts:
        raise ArgumentError(f"experts holds {experts.min()} to {experts.max()}; each must be an "
                            f"expert's index, 0 to num_experts - 1 = {num_experts - 1}.")
    capacity = check.integer("capacity", capacity, minimum=0)
    groups = _groups(t, groups)
    s = t // groups
    # each group's choices in GShard's order (choice-major), as one key per (group, expert)
    key = (experts.reshape(groups, s, k).transpose(0, 2, 1)
           + num_experts * np.arange(groups)[:, None, None]).ravel()
    order = np.argsort(key, kind="stable")  # by (group, expert), keeping GShard's order
    first = np.searchsorted(key[order], np.arange(groups * num_experts))  # where each run starts
    position = np.empty_like(order)
    position[order] = np.arange(key.size) - first[key[order]]  # place in its expert's slots
    return (position < capacity).reshape(groups, k, s).transpose(0, 2, 1).reshape(t, k)


def route(logits: ArrayOf("T E", finite=True), top_k_: int, capacity_factor: Factor,
          groups: int = 1,
          order: str = "before") -> Routing:
    """Top-k choices, gates and the GShard drop rule for ``logits[T, E]`` split into groups."""
    logits = _logits(logits)
    t, e = logits.shape
    if isinstance(top_k_, int) and top_k_ > e:
        raise ArgumentError(f"top_k_ = {top_k_} is more than the {e} experts of logits: a token "
                            f"cannot pick more experts than there are. Use top_k_ <= {e}.")
    validate(t, e, top_k_, capacity_factor, 1)
    groups = _groups(t, groups)
    c = capacity(t // groups, e, top_k_, capacity_factor)
    probs = softmax(logits)
    experts, gates = top_k(logits, top_k_, order, probs)
    return Routing(experts, gates, keep(experts, e, c, groups), probs, c, groups)


def aux_loss(probs: ArrayOf("T E", finite=True), experts: ArrayOf("T K", integer=True),
             weight: float = 0.01) -> float:
    """Switch's load-balancing loss λ · E · Σ_i f_i · P_i (λ = ``weight``; α is latency here).

    ``f_i``: the fraction of the T·k token-choices routed to expert i (before dropping; for k = 1
    Switch's fraction of tokens), so Σ f_i = 1; ``P_i``: the router's mean probability for
    expert i. A uniform load (or uniform probabilities) gives λ; it is not a strict minimum (f
    and P can pull apart: E = 3, k = 1 reaches 0.75·λ). With k = 1, all tokens on one expert
    give λ·E, the maximum; with top-k each expert holds at most 1/k of the choices
    (f_i ≤ 1/k), so the maximum is lower. Some libraries (Hugging Face's Mixtral) count f_i as
    a fraction of the tokens instead, Σ f_i = k, which multiplies the loss by k: minimum λ·k.
    """
    probs, experts = np.asarray(probs, np.float64), np.asarray(experts)
    e = probs.shape[1]
    if probs.min() < 0 or probs.max() > 1 + 1e-6:  # a float32 softmax may round up
        raise ArgumentError(f"probs holds {probs.min():g} to {probs.max():g}; router "
                            f"probabilities lie in [0, 1] (a softmax over the experts).")
    if not 0 <= experts.min() <= experts.max() < e:
        raise ArgumentError(f"experts holds {experts.min()} to {experts.max()}; each must be an "
                            f"expert's index, 0 to {e - 1} (probs has {e} experts).")
    f = np.bincount(experts.ravel(), minlength=e) / experts.size
    return float(weight * e * np.sum(f * probs.mean(0)))


# --- the layer on N devices --------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """Shapes, bytes and all-to-alls of one MoE layer with E/N experts on each of N devices."""

    tokens: int  # T, the whole batch
    experts: int  # E
    top_k: int  # k
    capacity_factor: float  # c_f
    devices: int  # N
    hidden: int  # H
    ffn: int  # F, one expert's width
    dtype: str
    group_tokens: int  # T_g = T / N, one device's group
    capacity: int  # C per expert and group
    shapes: dict  # name -> per-device shape
    expert_params_per_device: int  # 2 · (E/N) · H · F
    dispatch_bytes: int  # one device's buffer [E, C, H]

    @property
    def experts_per_device(self) -> int:
        return self.experts // self.devices

    def collectives(self, training: bool = False) -> Collectives:
        """Dispatch and combine all-to-alls (forward), twice that with the backward pass."""
        one = Collective("all-to-all", self.dispatch_bytes, self.devices, self.dtype,
                         (self.experts, self.capacity, self.hidden), (AXIS,),
                         what="token buffer [E, C, H]")
        return Collectives([one] * (2 + 2 * training) if self.devices > 1 else [])

    def tensor_parallel_collectives(self, training: bool = False) -> Collectives:
        """The all-reduce(s) of the same layer tensor-parallelised instead: every device holds
        1/N of every expert and all T tokens, and adds the partial outputs [T, H]."""
        size = layout.dtype_size(self.dtype)
        one = Collective("all-reduce", self.tokens * self.hidden * size, self.devices, self.dtype,
                         (self.tokens, self.hidden), (AXIS,), what="output [T, H]")
        return Collectives([one] * (1 + training) if self.devices > 1 else [])

    @property
    def flops_per_device(self) -> float:
        """Forward FLOPs of one device: the router on its T_g tokens, and its E/N experts on the
        N·C slots each (two matmuls of 2·H·F per slot; empty slots are computed too)."""
        slots = self.experts_per_device * self.devices * self.capacity
        return 2 * self.group_tokens * self.hidden * self.experts + 4 * slots * self.hidden * \
            self.ffn

    def time(self, system: cost.System) -> cost.Estimate:
        """Forward time of the layer on a system (α–β all-to-alls, peak FLOP/s)."""
        return cost.estimate(self.flops_per_device, self.collectives(), system)


def plan(tokens: int, experts: int, top_k: int, capacity_factor: Factor, devices: Devices,
         hidden: int = 16, ffn: int = 32, dtype: Dtype = "float32") -> Plan:
    """Per-device shapes and bytes of an expert-parallel MoE layer.

    Raises:
        ArgumentError: a size that is not a positive integer, k > E, or c_f <= 0.
        ShardingError: E or T not divisible by the devices.
    """
    validate(tokens, experts, top_k, capacity_factor, devices)
    hidden, ffn = check.integer("hidden", hidden), check.integer("ffn", ffn)
    tokens, experts, top_k, devices = (int(v) for v in (tokens, experts, top_k, devices))
    s, local = tokens // devices, experts // devices
    c = capacity(s, experts, top_k, capacity_factor)
    shapes = {"x": (s, hidden), "router": (hidden, experts), "w_in": (local, hidden, ffn),
              "w_out": (local, ffn, hidden), "dispatch": (experts, c, hidden),
              "expert input": (local, devices * c, hidden)}
    size = layout.dtype_size(dtype)
    return Plan(tokens, experts, top_k, float(capacity_factor), devices, hidden, ffn,
                str(layout.dtype_of(dtype)), s, c, shapes, 2 * local * hidden * ffn,
                experts * c * hidden * size)
