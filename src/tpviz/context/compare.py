"""When each scheme wins: bytes, time and activation memory of one attention layer (plan level).

Per device, every scheme computes the same FLOPs: the Q, K, V and output projections of its
S/N tokens' worth, 8·B·S·H²/N, and the attention scores and their product with the values,
4·B·S²·H/N (half of it under a causal mask, when the work is balanced). They differ in what they
send (:func:`tpviz.context.plan`) and in what they keep:

- ring: its queries, keys and values, the key/value block in flight, and one block of scores
  ``[B, n_h, S/N, S/N]`` at a time (twice: the scores and their exponentials);
- ulysses: q, k, v and the output for the whole sequence on n_h/N heads, and their scores
  ``[B, n_h/N, S, S]`` (twice): N times the ring's;
- sequence: the gathered layer-norm output ``[B, S, H]``, then as Ulysses.

Ring attention can hide its permutes: while block s is attended, block s+1 travels. A step's
permute is hidden when one block's attention, 4·B·(S/N)²·H FLOPs, takes at least as long as
sending the block, 2·B·(S/N)·H bytes: when S/N ≥ R·b / (2·W) tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tpviz.context.plan import check_sizes, plan
from tpviz.core import validate
from tpviz.core.collectives import Collective
from tpviz.core.cost import SYSTEMS, System
from tpviz.core.cost import system as lookup
from tpviz.core.kinds import Amount, Devices, Dtype, Time
from tpviz.core.layout import dtype_size


def _system(system) -> System:
    """A system by name (a key of ``SYSTEMS``) or as a :class:`System`."""
    if isinstance(system, System):
        return system
    return SYSTEMS[validate.choice("system", system, SYSTEMS)]


def price(collectives: Sequence[Collective], system: System) -> Time:
    """Seconds to run ``collectives`` on ``system``, each priced by the book's hardware model
    (:meth:`tpviz.core.cost.System.price`: the torus or the GPU nodes and their links, latency
    included). The one place this topic prices communication."""
    system = lookup(system)
    return sum(system.price(c).seconds for c in collectives)


def egress(system: System, devices: Devices) -> float:
    """W: bytes/s one device sends to its ring neighbour, NVLink (or ICI) when the group fits in
    a node, else its share of the node's network egress."""
    system = lookup(system)
    if system.node and devices > system.node and system.between_nodes:
        return system.between_nodes
    return system.bandwidth


@dataclass(frozen=True)
class Layer:
    """One attention layer's forward pass under one scheme, per device."""

    scheme: str
    sent_bytes: float  # bytes each device sends
    comm_s: float  # seconds of communication (α–β, not overlapped)
    compute_s: float  # seconds of compute at peak FLOP/s
    exposed_s: float  # communication not hidden behind compute (ring: per-step overlap)
    memory: float  # activation bytes held at the peak of the attention (plan formula)

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
           dtype: Dtype = "bf16") -> Amount:
    """Activation bytes per device at the peak of the attention (the module's list), with the
    scores materialised (no FlashAttention): q, k, v, output, what travels, and two buffers of
    scores (the scores and their exponentials, as XLA keeps them)."""
    scheme, s, a, n, h, _ = check_sizes(scheme, sequence, heads, devices, hidden)
    b, size, c = batch, dtype_size(dtype), sequence // devices
    if scheme == "ring":  # q, k, v, output of S/N tokens; 2 kv blocks; one block of scores
        return size * b * (4 * c * h + 2 * 2 * c * h + 2 * a * c * c)
    gathered = b * s * h if scheme == "sequence" else 0
    return size * (gathered + b * (4 * s * h // n + 2 * a // n * s * s))


def layer(scheme: str, sequence: int, heads: int, hidden: int, devices: Devices,
          system: System = "H100 (NVLink)", batch: int = 1, dtype: Dtype = "bf16",
          causal: bool = False) -> Layer:
    """Bytes, time and memory of one attention layer's forward pass under ``scheme``."""
    system, causal = _system(system), validate.flag("causal", causal)
    collectives = plan(scheme, sequence, heads, hidden, devices, batch=batch, dtype=dtype)
    comm = price(collectives, system)
    compute = flops(sequence, hidden, devices, batch, causal) / system.flops
    exposed = comm
    if scheme == "ring" and collectives:  # each permute overlaps the attention of a block
        block = 4 * batch * (sequence // devices) ** 2 * hidden / (2 if causal else 1)
        step = price(collectives[:1], system)
        exposed = len(collectives) * max(0.0, step - block / system.flops)
    return Layer(scheme, collectives.sent_bytes(), comm, compute, exposed,
                 memory(scheme, sequence, heads, hidden, devices, batch, dtype))


def hiding_block(hidden: int, system: System = "H100 (NVLink)", dtype: Dtype = "bf16",
                 devices: Devices = 8) -> float:
    """S/N, tokens per device from which one block's attention (non-causal) hides the next
    block's permute: 4·c²·H / R ≥ 2·c·H·b / W, so c ≥ R·b / (2·W) (independent of H)."""
    system = _system(system)
    validate.integer("hidden", hidden)
    devices = validate.integer("devices", devices, maximum=2**20)
    return system.flops * dtype_size(dtype) / (2 * egress(system, devices))
