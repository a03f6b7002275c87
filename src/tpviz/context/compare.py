"""When each scheme wins: bytes, time and activation memory of one attention layer (plan level).

Per device, every scheme computes the same FLOPs: the Q, K, V and output projections of its
S/N tokens' worth, 8·B·S·H²/N (a little less with grouped-query attention, which the model
ignores), and the attention scores and their product with the values, 4·B·S²·H/N (half of it
under a causal mask, when the work is balanced). They differ in what they send
(:func:`tpviz.context.plan`) and in what they keep, with φ = n_kv/n_h and the scores
materialised (no FlashAttention), twice (the scores and their exponentials, as XLA keeps them):

- ring: q and the output of its S/N tokens, its keys and values, the block it attends and the
  one arriving, and one block of scores ``[B, n_h, S/N, S/N]`` at a time;
- ulysses: q, k, v and the output for the whole sequence on n_h/N heads, and their scores
  ``[B, n_h/N, S, S]``: N times the ring's;
- sequence: the gathered layer-norm output ``[B, S, H]``, then as Ulysses;
- allgather: the gathered keys and values ``[2, B, S, n_kv, d_h]`` and the scores of its
  queries against all of them, ``[B, n_h, S/N, S]``: as many as Ulysses;
- usp: a ring of r = N/u over S/r tokens of n_h/u heads: scores ``[B, n_h/u, S/r, S/r]``.

Ring attention can hide its permutes: while block s is attended, block s+1 travels. A step's
permute is hidden when one block's attention, 4·B·(S/N)²·H FLOPs, takes at least as long as
sending the block, 2·φ·B·(S/N)·H bytes: when S/N ≥ R·φ·b / (2·W_p) tokens, W_p being what the book's
hardware model gives a permute to the ring's next device (one link, one direction).
Ulysses', all-gather's and usp's all-to-alls wait for the projections and the attention waits
for them: exposed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tpviz.context.plan import check_sizes, default_ulysses, plan
from tpviz.core import validate
from tpviz.core.collectives import Collective
from tpviz.core.cost import SYSTEMS, System
from tpviz.core.kinds import Amount, Devices, Dtype, Time
from tpviz.core.layout import dtype_size


def _system(system) -> System:
    """A system by name (a key of ``SYSTEMS``) or as a :class:`System`."""
    if isinstance(system, System):
        return system
    return SYSTEMS[validate.choice("system", system, SYSTEMS)]


def price(collectives: Sequence[Collective], system: System, per_node: int | None = None
          ) -> Time:
    """Seconds to run ``collectives`` on ``system``, each priced by the book's hardware model
    (:meth:`tpviz.core.cost.System.price`: the torus or the GPU nodes and their links, latency
    included; a GPU group has ``per_node`` devices in each node, default packed). The one
    place this topic prices communication."""
    system = _system(system)
    return sum(system.price(c, per_node).seconds for c in collectives)


def permute_bandwidth(system: System, devices: Devices) -> float:
    """W, bytes/s of one permute to the next device of a ring of ``devices``, read from the
    book's price of a permute (its bandwidth term): one link in one direction on a TPU torus,
    NVLink inside a GPU node, the GPU's share of its node's NICs across nodes."""
    system = _system(system)
    devices = validate.integer("devices", devices, maximum=2**20)
    if devices == 1:
        return math.inf
    v = float(2**30)
    return v / system.price(Collective("collective-permute", 2**30, devices)).bandwidth_s


def _ring_per_node(system: System, ring: int, stride: int) -> int | None:
    """Devices of one ring (r devices, ``stride`` apart) in each GPU node."""
    if not system.node or system.tpu:
        return None
    return math.gcd(ring, max(1, system.node // stride))


@dataclass(frozen=True)
class Layer:
    """One attention layer's forward pass under one scheme, per device."""

    scheme: str
    sent_bytes: float  # bytes each device sends
    comm_s: float  # seconds of communication (α–β, not overlapped)
    compute_s: float  # seconds of compute at peak FLOP/s
    exposed_s: float  # communication not hidden behind compute (ring: per-step overlap)
    memory: float  # activation bytes held at the peak of the attention (plan formula)
    ulysses: int = 1  # usp's u (1 otherwise)

    @property
    def time_s(self) -> float:
        return self.compute_s + self.exposed_s

    @property
    def bound(self) -> str:
        return "communication" if self.exposed_s > self.compute_s else "compute"


def flops(sequence: int, hidden: int, devices: Devices, batch: int = 1,
          causal: bool = False) -> Amount:
    """FLOPs per device of one attention layer's forward pass (the same for every scheme)."""
    s, h, n, b = sequence, hidden, devices, batch
    return 8 * b * s * h * h / n + 4 * b * s * s * h / n / (2 if causal else 1)


def memory(scheme: str, sequence: int, heads: int, hidden: int, devices: Devices, batch: int = 1,
           dtype: Dtype = "bf16", kv_heads: int | None = None, ulysses: int | None = None) -> float:
    """Activation bytes per device at the peak of the attention (the module's list), with the
    scores materialised (no FlashAttention)."""
    z = check_sizes(scheme, sequence, heads, devices, hidden, kv_heads=kv_heads, ulysses=ulysses)
    b, size, n, s, a, h = batch, dtype_size(dtype), z.devices, z.sequence, z.heads, z.hidden
    kvh = h * z.kv_heads // a  # n_kv · d_h
    c = s // n
    if z.scheme == "usp" and 1 in (z.ulysses, z.ring):  # usp with one axis of 1 is the other
        z = replace(z, scheme="ring" if z.ulysses == 1 else "ulysses")
    if z.scheme == "ring":  # q, o; k, v; the block held and the one arriving; one block's scores
        return size * b * (2 * c * h + 6 * c * kvh + 2 * a * c * c)
    if z.scheme == "usp":  # as the ring, over S/r tokens of n_h/u heads, beside its inputs
        t, u = s // z.ring, z.ulysses
        return size * b * (4 * c * h + 8 * c * kvh + 2 * a // u * t * t)
    if z.scheme == "allgather":  # q, o, k, v; the gathered block; scores of c queries × S keys
        return size * b * (2 * c * h + 2 * c * kvh + 2 * s * kvh + 2 * a * c * s)
    gathered = b * s * h if z.scheme == "sequence" else 0
    return size * (gathered + b * (2 * s * h + 2 * s * kvh) // n + b * 2 * a // n * s * s)


def layer(scheme: str, sequence: int, heads: int, hidden: int, devices: Devices,
          system: System = "H100 (NVLink)", batch: int = 1, dtype: Dtype = "bf16",
          causal: bool = False, kv_heads: int | None = None,
          ulysses: int | None = None) -> Layer:
    """Bytes, time and memory of one attention layer's forward pass under ``scheme``.

    ``ulysses``: usp's u (default: the largest that divides N and both head counts and, on a
    system of GPU nodes, fits in one node)."""
    system, causal = _system(system), validate.flag("causal", causal)
    if scheme == "usp" and ulysses is None:
        z = check_sizes(scheme, sequence, heads, devices, hidden, kv_heads=kv_heads, ulysses=1)
        node = 0 if system.tpu or not system.node else system.node
        ulysses = default_ulysses(z.devices, z.heads, z.kv_heads, node)
    sizes = dict(kv_heads=kv_heads, ulysses=ulysses if scheme == "usp" else None)
    z = check_sizes(scheme, sequence, heads, devices, hidden, **sizes)
    collectives = plan(scheme, sequence, heads, hidden, devices, batch=batch, dtype=dtype,
                       **sizes)
    ring = [c for c in collectives if c.kind == "collective-permute"]
    rest = [c for c in collectives if c.kind != "collective-permute"]
    per_node = _ring_per_node(system, z.ring, z.ulysses) if scheme == "usp" else None
    ring_s = price([replace(c, group_size=z.ring) for c in ring], system, per_node)
    rest_s = price(rest, system)
    compute = flops(z.sequence, z.hidden, z.devices, batch, causal) / system.flops
    exposed = rest_s
    if ring:  # each permute overlaps the attention of a block: 4·B·(S/r)²·H/u FLOPs
        t = z.sequence // z.ring
        block = 4 * batch * t * t * z.hidden / z.ulysses / (2 if causal else 1)
        step = ring_s / len(ring)
        exposed += len(ring) * max(0.0, step - block / system.flops)
    return Layer(scheme, collectives.sent_bytes(), ring_s + rest_s, compute, exposed,
                 memory(scheme, sequence, heads, hidden, devices, batch, dtype, **sizes),
                 z.ulysses)


def hiding_block(hidden: int, system: System = "H100 (NVLink)", dtype: Dtype = "bf16",
                 devices: Devices = 8, heads: int = 1, kv_heads: int | None = None) -> float:
    """S/N, tokens per device from which one block's attention (non-causal) hides the next
    block's permute: 4·c²·H / R ≥ 2·φ·c·H·b / W_p, so c ≥ R·φ·b / (2·W_p) (independent of H),
    with W_p = :func:`permute_bandwidth` (W_link on a TPU torus, W on NVLink) and φ =
    n_kv/n_h (1 by default)."""
    system = _system(system)
    validate.integer("hidden", hidden)
    z = check_sizes("ring", 1, heads, 1, kv_heads=kv_heads)
    phi = z.kv_heads / z.heads
    return system.flops * phi * dtype_size(dtype) / (2 * permute_bandwidth(system, devices))


