"""A GPU cluster: nodes of GPUs on an NVLink switch, nodes joined by NICs in a fat tree.

A collective over a group of n GPUs, k in each of M nodes (n = k·M), runs hierarchically, one ring
per level, the levels overlapped (austin2025scaling, "How to Think About GPUs", cross-node
collectives): ``bandwidth_s = V · max over levels of (D - 1)/(D · W_level)`` with

- inside a node, D = k GPUs and W = one GPU's NVLink egress (450 GB/s on H100);
- between nodes, through the leaf switches of a scalable unit (SU: 32 nodes in NVIDIA's H100
  SuperPod), D = min(M, 32) nodes and W = the group's share of node egress: k NICs, one per GPU
  on a rail-optimized network (8 × 400 Gb/s = 400 GB/s for a whole H100 node; 50 GB/s for a
  group with one GPU per node, whose other rails serve the other groups): 400e9 · 32/31 =
  413 GB/s for M ≥ 32, the Scaling Book's figure;
- between SUs, through the spine (a fat tree: full bisection), D = ⌈M/32⌉ SUs and W = the
  egress of an SU's 32 nodes (12.8 TB/s for whole H100 nodes): never the bound.

An all-reduce costs twice that, or with in-network reduction (SHARP: NVLink SHARP inside the
node, InfiniBand SHARP between) ``V · max(1/W_level)``, without the 2 and the (D - 1)/D. An
all-to-all: inside a node (k - 1)·V/(n·k·W_nvlink); between nodes the node sends (M - 1)/M of
its V/M, so (M - 1)·V/(M²·k·W_nic): it does not get cheaper with hierarchy. Latency, from
NCCL's tuning model for its ring algorithm and low-latency (LL) protocol, the one NCCL picks
for the small messages where latency matters (nvidia2023nccl, ``src/graph/tuning.cc``): a base
latency per collective (``baseLat``, 6.6 µs) plus the ring steps of each level, (k - 1) at
α_NVLink (0.6 µs) and (min(M, 32) - 1) + (⌈M/32⌉ - 1) at α_network (2.7 µs) (twice for an
all-reduce; two per level with SHARP, an
approximation: NCCL's own NVLink SHARP entries differ). NCCL's flat ring (``algorithm="ring"``)
counts as tuning.cc does: n - 1 steps, M - 1 of them between nodes, the others at least its
network overhead (1 µs) once the ring spans nodes. For large messages NCCL switches to its
Simple protocol (3.4 µs per NVLink step, 14 µs per network step), where the bandwidth term
dominates anyway. A collective-permute (NCCL send/receive, outside that table) pays one step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpviz.core.hardware.chips import CHIPS, Chip
from tpviz.core.hardware.price import Price, kind_of
from tpviz.core.kinds import Amount, Devices, Time


@dataclass(frozen=True)
class GpuSystem:
    """A GPU node design and its scale-out network.

    Attributes:
        chip: the GPU.
        gpus_per_node: the NVLink domain (0: every GPU in one domain, a flat switch).
        nvlink: bytes/s one GPU sends into the NVLink switch (one direction).
        nics_per_node: NICs per node (one per GPU on a rail-optimized network).
        nic: bytes/s of one NIC, one direction.
        sharp: in-network reduction (NVLink SHARP and InfiniBand SHARP) on.
        nvlink_latency, network_latency: α per ring step inside a node and between nodes.
        source: ``references.bib`` key of the link numbers.
        base_latency: the fixed latency of one collective, whatever its steps (NCCL's baseLat).
        unit: nodes per scalable unit, under one set of leaf switches (0: one level of NICs).
    """

    name: str
    chip: Chip
    gpus_per_node: int
    nvlink: float
    nics_per_node: int
    nic: float
    sharp: bool
    nvlink_latency: float
    network_latency: float
    source: str
    base_latency: float = 0.0
    unit: int = 32  # NVIDIA's DGX SuperPod: 32 nodes per scalable unit (austin2025scaling)

    @property
    def node_egress(self) -> float:
        """Bytes/s one node sends to other nodes (all its NICs)."""
        return self.nics_per_node * self.nic


NCCL_BASE = 6.6e-6  # NCCL's baseLat of the ring algorithm, LL protocol (nvidia2023nccl)
# NCCL's getNetOverhead (x86 Intel and its default; 2 µs on AMD): the least latency of a step
# inside a node of a ring that spans nodes (nvidia2023nccl)
NCCL_NET_OVERHEAD = 1e-6

GPUS = {s.name: s for s in (
    # DGX H100: 8 GPUs, NVLink 4 at 900 GB/s both ways = 450 GB/s each way; 8 ConnectX-7 NICs of
    # 400 Gb/s = 50 GB/s each way (nvidia2023dgxh100, austin2025scaling); α: NCCL ring LL
    # hwLat 0.6 µs NVLink, 2.7 µs network, baseLat 6.6 µs (nvidia2023nccl)
    GpuSystem("H100", CHIPS["H100"], 8, 4.5e11, 8, 5e10, False, 0.6e-6, 2.7e-6,
              "nvidia2023dgxh100", NCCL_BASE),
    GpuSystem("H100 + SHARP", CHIPS["H100"], 8, 4.5e11, 8, 5e10, True, 0.6e-6, 2.7e-6,
              "nvidia2023dgxh100", NCCL_BASE),
    # DGX A100 (Selene): NVLink 3 at 600 GB/s both ways; 8 HDR NICs of 200 Gb/s = 25 GB/s
    # (narayanan2021megatron)
    GpuSystem("A100", CHIPS["A100"], 8, 3e11, 8, 2.5e10, False, 0.6e-6, 2.7e-6,
              "narayanan2021megatron", NCCL_BASE),
    # DGX B200: NVLink 5 at 1.8 TB/s both ways = 900 GB/s; 8 NICs of 400 Gb/s
    # (austin2025scaling's NVLink table)
    GpuSystem("B200", CHIPS["B200"], 8, 9e11, 8, 5e10, False, 0.6e-6, 2.7e-6,
              "austin2025scaling", NCCL_BASE),
)}


@dataclass(frozen=True)
class GpuCluster:
    """``gpus`` GPUs of ``system``, packed into nodes; see the module text for the prices."""

    system: GpuSystem
    gpus: int

    @property
    def chip(self) -> Chip:
        return self.system.chip

    @property
    def nodes(self) -> int:
        per = self.system.gpus_per_node or self.gpus
        return math.ceil(self.gpus / per)

    def price(self, kind: str, nbytes: float, gpus: int | None = None,
              per_node: int | None = None, algorithm: str = "hierarchical") -> Price:
        """The :class:`Price` of ``kind`` on V = ``nbytes`` over a group of ``gpus`` GPUs
        (default: all), ``per_node`` of them in each node (default: packed, as many as fit).

        ``algorithm="ring"``: NCCL's flat ring through all n GPUs instead of one ring per level
        (its channels spread over the node's NICs): every byte of (n - 1)/n · V crosses the
        slower of NVLink and the group's NICs, ``(n - 1)/n · V / min(W_nvlink, k·W_nic)``."""
        from tpviz.core import validate
        from tpviz.errors import ArgumentError

        s = self.system
        kind = kind_of(kind)
        algorithm = validate.choice("algorithm", algorithm, ("hierarchical", "ring"))
        v = validate.number("nbytes", nbytes, minimum=0)
        n = validate.integer("gpus", self.gpus if gpus is None else gpus)
        if n > self.gpus:
            raise ArgumentError(f"gpus = {n} is more than this cluster's {self.gpus} GPUs; "
                                f"price a group of at most {self.gpus}, or build a larger "
                                f"cluster with gpu_cluster({s.name!r}, {n}).")
        node = s.gpus_per_node or n
        k = min(n, node) if per_node is None else validate.integer("per_node", per_node)
        if k > node or n % k:
            raise ArgumentError(f"per_node = {k} must divide gpus = {n} and be at most "
                                f"{node} (GPUs per node).")
        m = n // k
        if n <= 1:
            return Price(kind, v, 0.0, 0.0, "none")
        nvl = s.nvlink
        out = k * s.node_egress / s.gpus_per_node if s.gpus_per_node else 0.0
        nics = f"node NICs ({out / 1e9:g} GB/s)"
        if kind == "collective-permute":
            inside = m == 1
            return Price(kind, v, s.nvlink_latency if inside else s.network_latency,
                         v / (nvl if inside else out / k), "NVLink" if inside else "NIC")
        if kind == "all-to-all":
            terms = {"NVLink": (k - 1) * v / (n * k * nvl), nics: (m - 1) * v / (m * m * out)
                     if m > 1 else 0.0}
            steps = (k - 1) * s.nvlink_latency + (m - 1) * s.network_latency
        elif kind == "all-reduce" and s.sharp:
            terms = {"NVLink": v / nvl if k > 1 else 0.0, nics: v / out if m > 1 else 0.0}
            steps = 2 * (k > 1) * s.nvlink_latency + 2 * (m > 1) * s.network_latency
        elif algorithm == "ring" and m > 1:
            twice = 2 if kind == "all-reduce" else 1
            slow = min(nvl, out)
            terms = {"NVLink" if slow == nvl else nics: twice * (n - 1) / n * v / slow}
            # NCCL's ring: n - 1 steps, m - 1 of them between nodes (twice both for an
            # all-reduce); once the ring leaves a node, a step inside one costs at least
            # NCCL's network overhead
            inside = max(s.nvlink_latency, NCCL_NET_OVERHEAD)
            steps = twice * ((n - m) * inside + (m - 1) * s.network_latency)
        else:
            twice = 2 if kind == "all-reduce" else 1
            leaf = min(m, s.unit) if s.unit else m  # nodes in one ring under the leaves
            units = math.ceil(m / leaf)  # rings of scalable units under the spine
            terms = {"NVLink": twice * (k - 1) / k * v / nvl,
                     nics: twice * (leaf - 1) / leaf * v / out if m > 1 else 0.0,
                     "spine": twice * (units - 1) / units * v / (leaf * out) if units > 1
                     else 0.0}
            steps = twice * ((k - 1) * s.nvlink_latency
                             + (leaf - 1 + units - 1) * s.network_latency)
        link = max(terms, key=terms.get)
        return Price(kind, v, s.base_latency + steps, terms[link], link)

    def collective_time(self, kind: str, nbytes: Amount, gpus: int | None = None) -> Time:
        """Seconds (latency included) of ``kind`` on V = ``nbytes`` over the first ``gpus``
        GPUs (default: all), packed into nodes."""
        return self.price(kind, nbytes, gpus).seconds


def gpu_cluster(name: str, gpus: Devices) -> GpuCluster:
    """``gpus`` GPUs of the node design ``name`` ("H100", "H100 + SHARP", "A100", "B200").

    Raises:
        ArgumentError: an unknown name or a GPU count that is not positive.
    """
    from tpviz.core import validate

    return GpuCluster(GPUS[validate.choice("name", name, GPUS)], validate.integer("gpus", gpus))
