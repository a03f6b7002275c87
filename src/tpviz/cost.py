"""A roofline-style cost model: time to compute versus time to communicate.

Following the Scaling Book: a collective over a group moving an array of V bytes in total takes
about V / W for an all-gather or a reduce-scatter and 2V / W for an all-reduce (a reduce-scatter
followed by an all-gather), where W is the bandwidth with which each device sends and receives.
Compute takes FLOPs / peak FLOP/s. Whichever is larger bounds the step when the two overlap.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class System:
    """One kind of accelerator and the link its collectives use.

    Attributes:
        flops: peak dense bf16 FLOP/s of one device.
        bandwidth: bytes/s one device sends (and receives) in a collective over one mesh axis.
        source: where the numbers come from (a key of ``references.bib``).
        node: devices that share the fast link (0: all of them, as on a TPU pod's ICI).
        between_nodes: bytes/s one device sends to other nodes (used when ``node`` is set).
    """

    name: str
    flops: float
    bandwidth: float
    source: str
    node: int = 0
    between_nodes: float = 0.0


SYSTEMS = {
    # TPU numbers: the Scaling Book's tables; W = bidirectional ICI bandwidth of one axis
    "TPU v5e (ICI)": System("TPU v5e (ICI)", 1.97e14, 9.0e10, "austin2025scaling"),
    "TPU v5p (ICI)": System("TPU v5p (ICI)", 4.59e14, 1.8e11, "austin2025scaling"),
    # H100 SXM: 989 TFLOP/s dense bf16; NVLink 4 900 GB/s in both directions = 450 GB/s each way
    "H100 (NVLink)": System("H100 (NVLink)", 9.89e14, 4.5e11, "nvidia2023h100"),
    # the same GPU in a box whose only link is PCIe 4.0 x16: 16 GT/s x 16 lanes ≈ 31.5 GB/s
    "H100 (PCIe 4.0 x16)": System("H100 (PCIe 4.0 x16)", 9.89e14, 3.15e10, "pcisig2017pcie4"),
    # a cluster of 8-GPU H100 nodes: NVLink inside a node, one 400 Gb/s InfiniBand NIC per GPU
    # (50 GB/s each way) between nodes; the Scaling Book's GPU chapter
    "H100 cluster (NVLink + InfiniBand)": System("H100 cluster (NVLink + InfiniBand)", 9.89e14,
                                                 4.5e11, "austin2025scaling", node=8,
                                                 between_nodes=5.0e10),
}


def collective_time(kind: str, full_bytes: float, bandwidth: float) -> float:
    """Seconds for one collective moving an array of ``full_bytes`` over a group."""
    factor = {"all-gather": 1.0, "reduce-scatter": 1.0, "all-reduce": 2.0, "all-to-all": 1.0}
    return factor[kind] * full_bytes / bandwidth


@dataclass(frozen=True)
class Estimate:
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


def estimate(flops: float, collectives, system: System) -> Estimate:
    """Times for ``flops`` per device and ``collectives`` (with ``kind`` and ``full_bytes``)."""
    comm = sum(collective_time(c.kind, c.full_bytes, system.bandwidth) for c in collectives)
    return Estimate(flops / system.flops, comm)
