"""Compute time versus communication time, priced by :mod:`tpviz.core.hardware`.

Compute takes FLOPs / peak FLOP/s. A collective takes what :mod:`tpviz.core.hardware` prices it
at (:func:`price`): a latency term (hops × α) and a bandwidth term (bytes over the busiest link /
its bandwidth), on a TPU torus axis with wraparound or on GPUs (NVLink inside a node, the node's
NICs between nodes, hierarchically). With ring algorithms an all-gather or a reduce-scatter of
a V-byte array moves (n-1)/n · V through each device's links, an all-reduce twice that: for
large n the Scaling Book's V / W and 2V / W. Whichever of compute and communication is larger
bounds the step when the two overlap.

A :class:`System` is a name, a chip's FLOP/s and the network its collectives use; the presets in
``SYSTEMS`` take every number from :mod:`tpviz.core.hardware`. A TPU group is priced on the
slice's own topology: on the slice and torus axes :meth:`System.on_slice` names for its mesh
axes, or else on the group laid out by :meth:`tpviz.core.hardware.TpuSystem.group` (one torus
axis while it fits, with wraparound only where the generation has it: a 4-chip v5e group is a
line, and gathers at half the bandwidth of a ring). A GPU group is priced on its nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from tpviz.core import hardware as hw
from tpviz.core.collectives import Collective
from tpviz.core.compound import Seq
from tpviz.core.hardware.gpu import NCCL_BASE, GpuCluster, GpuSystem
from tpviz.core.hardware.tpu import TpuSlice, TpuSystem
from tpviz.core.kinds import Amount, Any_, Devices, Of, Sizes, SystemLike
from tpviz.core.rules import Instance


@dataclass(frozen=True)
class System:
    """One kind of accelerator and the network its collectives use.

    Attributes:
        flops: peak dense bf16 FLOP/s of one device.
        bandwidth: W, bytes/s one device sends (one direction: its egress, not egress plus
            ingress) into a collective over one mesh axis: on a TPU torus axis with wraparound
            its two links together, one each way round the ring (an axis without wraparound
            gets one of them: the slice model prices it so); on a GPU its NVLink egress into
            the switch.
        source: where the numbers come from (a key of ``references.bib``).
        node: devices that share the fast link (0: all of them, as on a TPU pod's ICI).
        between_nodes: bytes/s one device sends to other nodes through its own NIC (used when
            ``node`` is set; a whole node sends ``node`` times that).
        latency: α, seconds per hop (TPU) or ring step (GPU) of a collective.
        tpu: the TPU generation (a key of ``hardware.TPUS``) whose torus prices collectives;
            "" for a switched network (GPUs, or a hypothetical box).
        network_latency: α of a step between nodes (default: ``latency``).
        sharp: in-network reduction of all-reduces (NVLink and InfiniBand SHARP).
        algorithm: "hierarchical" (one ring per level) or "ring" (NCCL's flat ring) for groups
            that span nodes.
        base_latency: a fixed latency per collective on GPUs (NCCL's baseLat).
        slice: the TPU slice's shape, when known (:meth:`on_slice`); () prices each group on
            its own (:meth:`tpviz.core.hardware.TpuSystem.group`).
        placement: (mesh axis, torus axes) pairs: which axes of ``slice`` each mesh axis spans.
    """

    name: str
    flops: float
    bandwidth: float
    source: str
    node: int = 0
    between_nodes: float = 0.0
    latency: float = 0.0
    tpu: str = ""
    network_latency: float | None = None
    sharp: bool = False
    algorithm: str = "hierarchical"
    base_latency: float = 0.0
    slice: tuple[int, ...] = ()
    placement: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def network(self, devices: Devices) -> TpuSlice | GpuCluster:
        """The :mod:`tpviz.core.hardware` network a group of ``devices`` runs on: on a TPU the
        group laid out on its own torus axes (:meth:`tpviz.core.hardware.TpuSystem.group`),
        or that many GPUs in nodes of ``node``."""
        return _network(self, devices)

    def on_slice(self, mesh_shape: Sizes(), **axes: Any_) -> System:
        """This TPU system on a slice of ``mesh_shape`` chips whose torus axes the mesh axes
        span: ``SYSTEMS["TPU v5e (ICI)"].on_slice((2, 4), X=0, Y=1)`` prices a collective over
        mesh axis Y on the slice's axis 1 (a line of 4 on a v5e), one over ("X", "Y") on both.
        A mesh axis may span several torus axes (``X=(0, 1)``).

        Raises:
            ArgumentError: not a TPU system, a slice the generation has no such shape for, or a
                torus axis named twice.
        """
        from tpviz.errors import ArgumentError

        if not self.tpu:
            raise ArgumentError(f"system {self.name!r} is not a TPU slice; on_slice needs one of "
                                "the TPU presets.")
        shape = hw.tpu(self.tpu, mesh_shape).mesh_shape
        placement = tuple((name, (a,) if not isinstance(a, tuple | list) else tuple(a))
                          for name, a in axes.items())
        used = [a for _, t in placement for a in t]
        if (any(not isinstance(a, int) or not 0 <= a < len(shape) for a in used)
                or len(set(used)) != len(used)):
            raise ArgumentError(f"axes = {dict(placement)} must name each torus axis of "
                                f"{shape} (0 to {len(shape) - 1}) at most once.")
        return replace(self, slice=shape, placement=placement)

    def price(self, collective: Collective, per_node: int | None = None) -> hw.Price:
        """The :class:`tpviz.core.hardware.Price` of a :class:`Collective` on this system; a
        GPU group has ``per_node`` devices in each node (default: packed). On a TPU slice
        (:meth:`on_slice`) the collective's mesh axes say which torus axes it runs on.

        A TPU permute that carries its (source, target) pairs (``groups``, as read from a
        compiled program) is routed pair by pair (:meth:`tpviz.core.hardware.TpuSlice.permute`):
        device ids are row-major chips of the slice (:meth:`on_slice`) when they fit in it, else
        of the group of chips up to the largest id. Without pairs a permute is a cyclic shift
        by one over the group."""
        kind, n = collective.kind, collective.group_size
        v = collective.bytes * n if kind in ("all-to-all", "reduce-scatter") else collective.bytes
        pairs = collective.groups if kind == "collective-permute" else ()
        if self.tpu and pairs and all(len(pair) == 2 for pair in pairs):
            ids = max(d for pair in pairs for d in pair) + 1
            net = _slice(self) if self.slice and ids <= math.prod(self.slice) else (
                self.network(ids))
            return net.permute(v, pairs)
        placed = dict(self.placement)
        if self.slice and collective.axes and all(a in placed for a in collective.axes):
            net = _slice(self)
            axes = tuple(sorted(t for a in collective.axes for t in placed[a]))
            spans = math.prod(self.slice[t] for t in axes)
            if spans != n:
                from tpviz.errors import ArgumentError

                raise ArgumentError(f"the collective's group of {n} runs along mesh axes "
                                    f"{collective.axes}, which span {spans} chips of the slice "
                                    f"{self.slice}; place the mesh axes with on_slice(...) to "
                                    "match the mesh.")
            return net.price(kind, v, axes)
        net = self.network(n)
        if isinstance(net, TpuSlice):
            return net.price(kind, v)
        return net.price(kind, v, n, per_node, self.algorithm)


def _torus(self: System) -> TpuSystem:
    """The generation's torus with this system's W (= 2 links) and α."""
    return replace(hw.TPUS[self.tpu], link=self.bandwidth / 2, hop_latency=self.latency)


@lru_cache(maxsize=256)
def _slice(self: System) -> TpuSlice:
    """The slice of :meth:`System.on_slice`, with the generation's wraparound."""
    torus = _torus(self)
    return TpuSlice(torus, self.slice, torus.wraparound(self.slice))


@lru_cache(maxsize=1024)
def _network(self: System, devices: int) -> TpuSlice | GpuCluster:
    """:meth:`System.network`, built once per system and group size."""
    if self.tpu:
        return _torus(self).group(devices)
    chip = hw.Chip(self.name, {"bf16": self.flops}, 0.0, 0.0, self.source)
    net = self.latency if self.network_latency is None else self.network_latency
    gpus = GpuSystem(self.name, chip, self.node if self.between_nodes else 0,
                     self.bandwidth, self.node, self.between_nodes, self.sharp,
                     self.latency, net, self.source, self.base_latency)
    return GpuCluster(gpus, devices)


def _tpu(name: str) -> System:
    s = hw.TPUS[name]
    return System(f"{name} (ICI)", s.chip.peak(), 2 * s.link, s.source, latency=s.hop_latency,
                  tpu=name)


def _gpu(label: str, name: str, nodes: bool = True) -> System:
    s = hw.GPUS[name]
    return System(label, s.chip.peak(), s.nvlink, s.source, node=s.gpus_per_node if nodes else 0,
                  between_nodes=s.node_egress / s.gpus_per_node if nodes else 0.0,
                  latency=s.nvlink_latency, network_latency=s.network_latency, sharp=s.sharp,
                  base_latency=s.base_latency)


# Every number comes from core.hardware. TPU: W = 2 ICI links (one each way round a ring with
# wraparound; a group without wraparound gets one), α = 1 µs per hop. GPUs: W = NVLink egress;
# between nodes one 400 Gb/s NIC per GPU (8 per node: 400 GB/s of node egress for a group that
# fills its nodes), hierarchical pricing; NCCL's base latency per collective.
SYSTEMS = {s.name: s for s in (
    _tpu("TPU v5e"), _tpu("TPU v5p"), _tpu("TPU v6e"), _tpu("TPU v4p"),
    _gpu("H100 (NVLink)", "H100", nodes=False),
    # a hypothetical box: the same GPU whose only link is PCIe 4.0 x16, 16 GT/s x 16 lanes x
    # 128/130 / 8 = 31.5 GB/s in each direction (pcisig2017pcie4); α: NCCL's PCI ring/LL 1 µs
    System("H100 (PCIe 4.0 x16)", hw.CHIPS["H100"].peak(), 3.15e10, "pcisig2017pcie4",
           latency=1e-6, base_latency=NCCL_BASE),
    _gpu("H100 cluster (NVLink + InfiniBand)", "H100"),
    _gpu("H100 cluster + SHARP", "H100 + SHARP"),
    _gpu("A100 cluster (NVLink + InfiniBand)", "A100"),
)}


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


def system(value: Any_, name: str = "system") -> System:
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


def estimate(flops: Amount, collectives: Of(Seq(Instance(Collective), 0)),
             system: SystemLike) -> Estimate:
    """Times for ``flops`` per device and ``collectives`` (:class:`Collective` objects), each
    priced by :meth:`System.price` (groups packed into nodes)."""
    system = _system(system)
    comm = sum(system.price(c).seconds for c in collectives)
    return Estimate(flops / system.flops, comm)
