"""The price of one collective: a latency term and a bandwidth term, and which one bounds it.

Time is the α–β model (Hockney's; thakur2005optimization): ``latency_s + bandwidth_s`` with
``latency_s`` = hops (or algorithm steps) × α and ``bandwidth_s`` = bytes through the busiest
link / its bandwidth. ``bound`` names the larger term: ``"latency"`` or the links that limit the
bandwidth term ("ICI", "NVLink", "node NICs", ...). Collective kinds are those of
:data:`tpviz.core.collectives.KINDS`.

**Why added, not max().** The Scaling Book writes a collective's time as
``max(hops · α, V / W)`` (austin2025scaling, "Sharded Matrices", the note on ICI latency): the
hops overlap the transfer. A ring all-gather cannot overlap them: each of its steps forwards a
shard it has only just received, so every step pays its α *and* its bytes, and the sum is what
the algorithm does. The sum is also the closer of the two to the measurement the Scaling Book
reports, though both are below it: a 32 kB-per-chip gather over a v5e axis of 4 that its max()
puts at 3 µs (three hops) took about 8 µs; the sum gives 5.2 µs. The two differ by at most a
factor of 2 (at the crossover), and agree wherever one term dominates.
:attr:`Price.overlapped_s` gives the max() form.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
ALIASES = {"permute": "collective-permute", "allreduce": "all-reduce", "allgather": "all-gather",
           "reducescatter": "reduce-scatter", "alltoall": "all-to-all"}


@dataclass(frozen=True)
class Price:
    """Seconds of one collective, split into its two terms.

    Attributes:
        kind: the collective.
        nbytes: V, bytes of the whole array (all-to-all: all buffers of the group together;
            permute: the bytes each device sends).
        latency_s: hops × per-hop latency.
        bandwidth_s: bytes over the busiest link / that link's bandwidth.
        link: which links carry the bandwidth term, in words.
    """

    kind: str
    nbytes: float
    latency_s: float
    bandwidth_s: float
    link: str

    @property
    def seconds(self) -> float:
        return self.latency_s + self.bandwidth_s

    @property
    def overlapped_s(self) -> float:
        """The Scaling Book's max() model: ``max(latency_s, bandwidth_s)``, as if the hops
        overlapped the transfer (a lower bound on :attr:`seconds`)."""
        return max(self.latency_s, self.bandwidth_s)

    @property
    def bound(self) -> str:
        """``"latency"`` when hops cost more than bytes, else the limiting link's name."""
        return "latency" if self.latency_s > self.bandwidth_s else self.link

    def __str__(self) -> str:
        return (f"{self.kind} of {self.nbytes:,.0f} B: {self.seconds * 1e6:,.1f} µs "
                f"(latency {self.latency_s * 1e6:,.1f} µs + bandwidth "
                f"{self.bandwidth_s * 1e6:,.1f} µs; {self.bound}-bound)")


def kind_of(kind: str) -> str:
    """``kind`` spelled as in :data:`KINDS` (``"permute"`` and ``"allreduce"`` also work)."""
    from tpviz.core import validate

    if isinstance(kind, str) and kind.lower() in ALIASES:
        return ALIASES[kind.lower()]
    return validate.choice("kind", kind, KINDS)


def ring_sum(n: int) -> float:
    """S(n): on a bidirectional ring of n devices with shortest-path routing, the hops one
    device's messages travel in one direction, summed over its n - 1 peers: n²/8 for even n
    (the peer n/2 away is split half each way), (n² - 1)/8 for odd n. An all-to-all in which each
    device sends b/n bytes to every peer loads each link, in each direction, with b·S(n)/n."""
    return n * n / 8 if n % 2 == 0 else (n * n - 1) / 8
