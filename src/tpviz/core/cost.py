"""A roofline-style cost model: time to compute versus time to communicate.

Compute takes FLOPs / peak FLOP/s. A collective takes the α–β time of
:meth:`tpviz.core.collectives.Collective.time`: ``steps · α + bytes sent / W``, where W is the
bandwidth with which one device sends into the collective (its egress over the links its group
uses, one direction). With ring algorithms an all-gather or a reduce-scatter of a V-byte array
sends (n-1)/n · V per device, an all-reduce twice that: for large n the Scaling Book's V / W and
2V / W. Whichever of compute and communication is larger bounds the step when the two overlap.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class System:
    """One kind of accelerator and the link its collectives use.

    Attributes:
        flops: peak dense bf16 FLOP/s of one device.
        bandwidth: W, bytes/s one device sends (one direction: its egress, not egress plus
            ingress) into a collective over one mesh axis: on a TPU torus axis with wraparound
            its two links together, one each way round the ring; on a GPU its NVLink egress
            into the switch. A ring collective sends ``Collective.sent_bytes`` at this rate.
        source: where the numbers come from (a key of ``references.bib``).
        node: devices that share the fast link (0: all of them, as on a TPU pod's ICI).
        between_nodes: bytes/s one device sends to other nodes (used when ``node`` is set).
        latency: α, seconds per step of a collective algorithm (0 in the presets: no cited
            value; the time is then bandwidth-only).
    """

    name: str
    flops: float
    bandwidth: float
    source: str
    node: int = 0
    between_nodes: float = 0.0
    latency: float = 0.0


# W in every preset follows the one definition above: the bytes per second ONE device SENDS
# (one direction) into a collective over one mesh axis. α (``latency``) is left at 0 in every
# preset: we found no published per-step latency for these links that we could cite; pass your
# own measured α to ``System(..., latency=...)``.
SYSTEMS = {
    # TPU v5e: 197 TFLOP/s bf16; ICI 4.5e10 B/s per link and direction (the Scaling Book's TPU
    # table, austin2025scaling). Along a torus axis with wraparound a chip sends over two links,
    # one each way round the ring: W = 2 x 4.5e10 = 9e10 (the book's "bidirectional" figure).
    "TPU v5e (ICI)": System("TPU v5e (ICI)", 1.97e14, 9.0e10, "austin2025scaling"),
    # TPU v5p: 459 TFLOP/s bf16; ICI 9e10 B/s per link and direction; W = 2 x 9e10 = 1.8e11.
    "TPU v5p (ICI)": System("TPU v5p (ICI)", 4.59e14, 1.8e11, "austin2025scaling"),
    # H100 SXM: 989 TFLOP/s dense bf16; NVLink 4: 900 GB/s counting both directions, so one GPU
    # sends 450 GB/s into the NVSwitch fabric (nvidia2023h100): W = 4.5e11.
    "H100 (NVLink)": System("H100 (NVLink)", 9.89e14, 4.5e11, "nvidia2023h100"),
    # a hypothetical box: the same GPU whose only link is PCIe 4.0 x16, 16 GT/s x 16 lanes x
    # 128/130 / 8 = 31.5 GB/s in each direction (pcisig2017pcie4): W = 3.15e10.
    "H100 (PCIe 4.0 x16)": System("H100 (PCIe 4.0 x16)", 9.89e14, 3.15e10, "pcisig2017pcie4"),
    # a cluster of 8-GPU H100 nodes: NVLink (W = 4.5e11) inside a node, one 400 Gb/s
    # InfiniBand NIC per GPU between nodes, 50 GB/s each way (the Scaling Book's GPU chapter)
    "H100 cluster (NVLink + InfiniBand)": System("H100 cluster (NVLink + InfiniBand)", 9.89e14,
                                                 4.5e11, "austin2025scaling", node=8,
                                                 between_nodes=5.0e10),
    # PTD-P's cluster (Selene): 8 A100 80GB per node (312 TFLOP/s bf16) on NVLink 3 / NVSwitch,
    # 600 GB/s both ways = 300 GB/s each way; 8 HDR InfiniBand HCAs of 200 Gb/s per node, so
    # 25 GB/s per GPU each way between nodes (Narayanan et al. 2021, section 5)
    "A100 cluster (NVLink + InfiniBand)": System("A100 cluster (NVLink + InfiniBand)", 3.12e14,
                                                 3.0e11, "narayanan2021megatron", node=8,
                                                 between_nodes=2.5e10),
}


@dataclass(frozen=True)
class Estimate:
    """Seconds of compute and of communication for one step."""

    compute_s: float
    comm_s: float

    @property
    def bound(self) -> str:
        """ "compute" when computing takes at least as long as communicating, else
        "communication"."""
        return "compute" if self.compute_s >= self.comm_s else "communication"

    @property
    def overlapped_s(self) -> float:
        return max(self.compute_s, self.comm_s)

    @property
    def serial_s(self) -> float:
        return self.compute_s + self.comm_s


def system(value, name: str = "system") -> System:
    """The one lookup of a system: a :class:`System` as it is, or the name of one in
    :data:`SYSTEMS` (letter case ignored).

    Raises:
        ArgumentTypeError: neither a name nor a System.
        ArgumentError: a name that is not in :data:`SYSTEMS` (the message lists them).
    """
    from tpviz.core import validate

    if isinstance(value, System):
        return value
    validate.instance(name, value, str, "a System or one of the names in "
                      "tpviz.core.cost.SYSTEMS", "For example 'H100 (NVLink)'.")
    lowered = {k.lower(): k for k in SYSTEMS}
    if value.lower() in lowered:
        return SYSTEMS[lowered[value.lower()]]
    return SYSTEMS[validate.choice(name, value, SYSTEMS)]


_system = system  # for the functions below, whose argument is also called ``system``


def bandwidth_for(system: System, group_size: int) -> float:
    """W for a collective over ``group_size`` devices: the fast link when the group fits in one
    node (or the system has no nodes), else the slower link between nodes, which a ring over
    several nodes must cross."""
    system = _system(system)
    if system.node and group_size > system.node and system.between_nodes:
        return system.between_nodes
    return system.bandwidth


def estimate(flops: float, collectives, system: System) -> Estimate:
    """Times for ``flops`` per device and ``collectives`` (:class:`Collective` objects), each at
    the system's latency and the bandwidth of its group (:func:`bandwidth_for`)."""
    system = _system(system)
    comm = sum(c.time(bandwidth_for(system, c.group_size), system.latency) for c in collectives)
    return Estimate(flops / system.flops, comm)
