"""A Megatron block as a plan: per-device weight shapes, bytes and all-reduces (no devices).

The first matmul of each half of a block is column-parallel (``W1[H, F_N]``), the second
row-parallel (``W2[F_N, H]``); attention splits its heads the same way (``W_Q, W_K, W_V``
by columns, ``W_O`` by rows). Per block: one all-reduce of the activations ``[tokens, H]``
after attention and one after the MLP in the forward pass (``g``), and one each in the backward
pass (``f``). The MLP alone has one and one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jax.sharding import PartitionSpec as P

from tpviz.core import layout, validate
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import Devices, Dtype
from tpviz.errors import ShardingError

AXIS = "model"
KINDS = ("mlp", "block")


def specs(kind: str, axis: str = AXIS) -> dict[str, P]:
    """Shardings of the weights of an MLP (``w1``, ``w2``) or a block (also ``wq, wk, wv, wo``).

    Raises:
        ShardingError: ``kind`` is not "mlp" or "block".
    """
    mlp = {"w1": P(None, axis), "w2": P(axis, None)}
    if kind == "mlp":
        return mlp
    if kind == "block":
        return {"wq": P(None, axis), "wk": P(None, axis), "wv": P(None, axis),
                "wo": P(axis, None), **mlp}
    raise ShardingError(f"unknown kind {kind!r}; use 'mlp' or 'block'.")


def shapes(kind: str, hidden: int, ffn: int) -> dict[str, tuple[int, int]]:
    """Full shapes of the weights: the MLP's W1 and W2, and for a block the attention
    projections."""
    mlp = {"w1": (hidden, ffn), "w2": (ffn, hidden)}
    if kind == "mlp":
        return mlp
    specs(kind)  # the same check of the kind
    return {"wq": (hidden, hidden), "wk": (hidden, hidden), "wv": (hidden, hidden),
            "wo": (hidden, hidden), **mlp}


@dataclass(frozen=True)
class Plan:
    """Shapes, bytes and communication of one Megatron MLP or block on N devices."""

    kind: str
    tokens: int  # batch x sequence
    hidden: int
    ffn: int
    heads: int
    devices: int
    dtype: str
    weights: dict[str, tuple[tuple[int, int], tuple[int, int]]]  # name -> (full, per device)
    weight_bytes: int  # whole block
    weight_bytes_per_device: int
    all_reduce_bytes: int  # one all-reduce: tokens x hidden elements
    forward_all_reduces: int  # g: after attention and after the MLP (block), or the MLP alone
    backward_all_reduces: int  # f: before attention and before the MLP

    def collectives(self, training: bool = False) -> Collectives:
        """The all-reduces of the forward pass, and with ``training`` the backward pass's."""
        count = self.forward_all_reduces + training * self.backward_all_reduces
        one = Collective("all-reduce", self.all_reduce_bytes, self.devices, self.dtype,
                         (self.tokens, self.hidden), (AXIS,), what="activations [tokens, H]")
        return Collectives([one] * count if self.devices > 1 else [])

    def flops(self, sequence: int = 0, training: bool = False) -> float:
        """FLOPs one device computes: 2 per multiply-add of every weight matmul (2 · tokens ·
        its weight parameters), plus for a block with ``sequence`` given its heads' share of
        QKᵀ and softmax·V (4 · tokens · sequence · H / N, no causal saving). ``training``: three
        times the forward pass (the backward pass does two matmuls for each forward one)."""
        params = sum(math.prod(s) for _, s in self.weights.values())
        forward = 2 * self.tokens * params
        if self.kind == "block" and sequence:
            forward += 4 * self.tokens * sequence * self.hidden / self.devices
        return 3 * forward if training else forward

    @property
    def ring_bytes_per_step(self) -> float:
        """Bytes each device sends per training step with ring all-reduces."""
        return self.collectives(training=True).sent_bytes()


def plan(tokens: int, hidden: int, ffn: int, heads: int, devices: Devices, dtype: Dtype = "bf16",
         kind: str = "block") -> Plan:
    """Per-device shapes and bytes of a Megatron block (or MLP) split over ``devices``.

    Raises:
        ShardingError: a size that is not a positive integer, heads or the feed-forward width
            not divisible by the devices, or the hidden size not divisible by the heads.
    """
    tokens, hidden, ffn, heads, devices = (
        validate.integer(name, value, error=ShardingError) for name, value in (
            ("tokens", tokens), ("hidden", hidden), ("ffn", ffn), ("heads", heads),
            ("devices", devices)))
    kind = validate.choice("kind", kind, KINDS, error=ShardingError)
    if kind == "block" and hidden % heads:
        raise ShardingError(f"hidden size {hidden} is not divisible by {heads} heads; each head "
                            "needs hidden / heads dimensions.")
    if kind == "block" and heads % devices:
        raise ShardingError(f"{heads} heads do not split over {devices} devices: each device "
                            f"computes whole heads. Use a device count that divides {heads}.")
    if ffn % devices:
        raise ShardingError(f"the feed-forward width {ffn} is not divisible by {devices} devices; "
                            "W1 is split by columns and W2 by rows over the devices.")
    size = layout.dtype_size(dtype)
    mesh = {AXIS: devices}
    weights = {k: (s, layout.shard_shape(s, specs(kind)[k], mesh))
               for k, s in shapes(kind, hidden, ffn).items()}
    total = sum(math.prod(s) for s, _ in weights.values()) * size
    per = sum(math.prod(s) for _, s in weights.values()) * size
    count = 1 if kind == "mlp" else 2
    return Plan(kind, tokens, hidden, ffn, heads, devices, str(layout.dtype_of(dtype)), weights,
                total, per, tokens * hidden * size, count, count)
