"""A TPU slice: a 2D or 3D torus of chips, links only to nearest neighbours (ICI).

Per-generation rule for wraparound links (austin2025scaling, "How to Think About TPUs"):

- **v5e, v6e** (one 16×16 pod, no optical switches): an axis has wraparound iff its size is 16
  (an 8×16 slice wraps on its long axis only).
- **v4p, v5p** (4×4×4 cubes joined by optical switches): wraparound on every axis iff the slice
  is made of whole cubes (every one of its three axes a multiple of 4); a 2×2×4 has none, nor
  has a 4×4 (= 4×4×1) (google2023tpuv4).

Pricing a collective over ``axes`` of the slice, with V the bytes of the whole array, N the
devices in the group, and W the ICI bandwidth of one link in one direction (4.5e10 B/s on v5e):

- **all-gather / reduce-scatter**: every axis ``a`` adds its links: 2W with wraparound (data
  flows both ways round the ring), W without (a line: the end chip receives everything over one
  link). ``bandwidth_s = (N - 1)/N · V / Σₐ Wₐ``; one axis with wraparound gives the Scaling
  Book's V / W_bidi. Hops: ⌊n/2⌋ per axis with wraparound, n - 1 without, summed over axes.
- **all-reduce**: a reduce-scatter then an all-gather, twice both terms.
- **all-to-all**: axis by axis; each device holds b = V/N and sends b/n to each of the n peers
  of the axis. On a ring each link carries b·S(n)/n each way (:func:`ring_sum`), = V/(8W) for a
  single even axis, the Scaling Book's V / (4 W_bidi): a quarter of an all-gather. On a line the
  middle link carries ⌊n/2⌋⌈n/2⌉ b/n, twice as much.
- **collective-permute**: each message is routed on the torus (:mod:`.route`): it leaves by every
  port that points towards its target and goes the short way round; the busiest link bounds the
  bandwidth term, the longest path the hops. :meth:`TpuSlice.send` prices one message (the
  Scaling Book's TPU{0,0} → TPU{3,3} on a v5e 4×4: two ports, six hops), :meth:`TpuSlice.permute`
  any set of (source, target) pairs, and ``price("collective-permute", V, axes)`` a cyclic shift
  by one over the chips of ``axes`` (a ring of ``ppermute``: V bytes from every chip).

Latency: α = 1 µs per hop (the Scaling Book's "typically around 1us"), **added** to the
bandwidth term (the α–β model, :class:`Price`). Between slices (DCN): each chip's share of its
host's NICs (:attr:`TpuSystem.dcn`).

A group of chips priced without a slice (``cost.System``) is laid out by
:meth:`TpuSystem.group`: along one torus axis while it fits (a 4-chip v5e group is a line of 4,
with no wraparound), then over the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpviz.core.hardware.chips import CHIPS, Chip
from tpviz.core.hardware.price import Price, kind_of, ring_sum
from tpviz.core.hardware.route import coordinates, route, shift_pairs
from tpviz.core.kinds import Amount, Any_, Indices, Of, Sizes, Time


@dataclass(frozen=True)
class TpuSystem:
    """A TPU generation's chip and network.

    Attributes:
        chip: the :class:`Chip`.
        link: ICI bytes/s of one link in one direction.
        hop_latency: α, seconds per ICI hop.
        dcn: DCN bytes/s per chip (egress) between slices.
        cubes: True for generations built from 4×4×4 cubes with optical switches (v4p, v5p).
        pod: the largest slice shape.
        source: ``references.bib`` key of the network numbers.
    """

    name: str
    chip: Chip
    link: float
    hop_latency: float
    dcn: float
    cubes: bool
    pod: tuple[int, ...]
    source: str = "austin2025scaling"

    def wraparound(self, mesh_shape: Sizes()) -> tuple[bool, ...]:
        """Which axes of a slice of this shape have wraparound links (the module's rule). On
        v4p and v5p a shape with fewer axes than the pod's is padded with 1s: a 4×4 slice is
        4×4×1, not whole cubes, so it has none."""
        shape = tuple(mesh_shape)
        if self.cubes:
            padded = shape + (1,) * (len(self.pod) - len(shape))
            whole = all(n % 4 == 0 for n in padded)
            return tuple(whole and n > 2 for n in shape)
        return tuple(n == 16 for n in shape)

    def group(self, devices: int) -> TpuSlice:
        """``devices`` chips on their own, as :class:`tpviz.core.cost.System` prices a group:
        along one torus axis while they fit (a pod axis: 16 on v5e), then over the next, each
        axis the largest divisor of what is left (v5e: 4 → (4,), 32 → (16, 2); v5p: 64 →
        (16, 4), 4096 → (16, 16, 16)). Each axis of the group is taken to run along a torus
        axis of a larger slice: on v5e and v6e a segment of a pod axis, a ring only when it is
        the whole 16; on v4p and v5p, whose slices are whole cubes, a whole slice axis (a
        ring) when its length is a multiple of 4, a segment (a line) otherwise: 32 → (16, 2)
        has wraparound on its 16 and not on its 2, like 16 → (16,) and 64 → (16, 4).

        Raises:
            ArgumentError: more chips than a pod holds, or a count no shape of pod axes makes.
        """
        from tpviz.core import validate
        from tpviz.errors import ArgumentError

        n = validate.integer("devices", devices)
        shape, left = [], n
        for size in sorted(self.pod, reverse=True):
            if left == 1:
                break
            shape.append(max(k for k in range(1, min(size, left) + 1) if left % k == 0))
            left //= shape[-1]
        if left > 1:
            raise ArgumentError(f"devices = {n} cannot be laid out on a {self.name} pod "
                                f"{self.pod} (axes of at most {max(self.pod)} chips); use a "
                                "count that fits, or DCN between slices.")
        shape = tuple(shape) or (1,)
        wrap = (tuple(k % 4 == 0 for k in shape) if self.cubes else self.wraparound(shape))
        return TpuSlice(self, shape, wrap)


TPUS = {s.name: s for s in (
    # ICI per link and direction, v4p and v5e 4.5e10, v5p/v6e 9e10 B/s; DCN per chip 3.125e9
    # (v5e), 6.25e9 (v4p, v5p: the book's "typical" figure), 1.25e10 (v6e); ~1 µs per hop; pods
    # 16x16, 16x16x16 (v4p: 4096 chips, google2023tpuv4) and 16x20x28 (austin2025scaling)
    TpuSystem("TPU v5e", CHIPS["TPU v5e"], 4.5e10, 1e-6, 3.125e9, False, (16, 16)),
    TpuSystem("TPU v5p", CHIPS["TPU v5p"], 9e10, 1e-6, 6.25e9, True, (16, 20, 28)),
    TpuSystem("TPU v6e", CHIPS["TPU v6e"], 9e10, 1e-6, 1.25e10, False, (16, 16)),
    TpuSystem("TPU v4p", CHIPS["TPU v4p"], 4.5e10, 1e-6, 6.25e9, True, (16, 16, 16)),
)}


@dataclass(frozen=True)
class TpuSlice:
    """A slice of ``mesh_shape`` chips; see the module text for how collectives are priced."""

    system: TpuSystem
    mesh_shape: tuple[int, ...]
    wrap: tuple[bool, ...]

    @property
    def chip(self) -> Chip:
        return self.system.chip

    def _axes(self, axes) -> tuple[int, ...]:
        from tpviz.core import validate

        if isinstance(axes, int):
            axes = (axes,)
        axes = tuple(validate.integer("axes", a, minimum=0, maximum=len(self.mesh_shape) - 1,
                                      fix=f"use indices into mesh_shape {self.mesh_shape}")
                     for a in axes)
        if len(set(axes)) != len(axes):
            from tpviz.errors import ArgumentError

            raise ArgumentError(f"axes = {axes} names an axis twice; name each once.")
        return tuple(a for a in axes if self.mesh_shape[a] > 1)

    def price(self, kind: str, nbytes: Amount, axes: Indices | None = None) -> Price:
        """The :class:`Price` of ``kind`` on V = ``nbytes`` bytes over ``axes`` (indices into
        ``mesh_shape``; default: all)."""
        from tpviz.core import validate

        kind = kind_of(kind)
        v = validate.number("nbytes", nbytes, minimum=0)
        axes = self._axes(range(len(self.mesh_shape)) if axes is None else axes)
        w, alpha = self.system.link, self.system.hop_latency
        sizes = [self.mesh_shape[a] for a in axes]
        rings = [self.wrap[a] for a in axes]
        n = math.prod(sizes)
        where = "ICI " + "+".join(f"axis {a}{'' if self.wrap[a] else ' (no wraparound)'}"
                                  for a in axes) if axes else "none"
        if n <= 1:
            return Price(kind, v, 0.0, 0.0, "none")
        hops = sum(k // 2 if ring else k - 1 for k, ring in zip(sizes, rings, strict=True))
        if kind == "collective-permute":
            return self.permute(v, shift_pairs(self.mesh_shape, axes))
        if kind == "all-to-all":
            b = v / n
            loads = [b * ring_sum(k) / k if ring else b * (k // 2) * (k - k // 2) / k
                     for k, ring in zip(sizes, rings, strict=True)]
            return Price(kind, v, hops * alpha, sum(loads) / w, where)
        egress = sum(2 * w if ring else w for ring in rings)
        once = (n - 1) / n * v / egress
        twice = 2 if kind == "all-reduce" else 1
        return Price(kind, v, twice * hops * alpha, twice * once, where)

    def _chip(self, name: str, chip) -> tuple[int, ...]:
        from tpviz.core import validate
        from tpviz.errors import ArgumentError

        if isinstance(chip, int) and not isinstance(chip, bool):
            index = validate.integer(name, chip, minimum=0, maximum=math.prod(self.mesh_shape) - 1)
            return coordinates(self.mesh_shape, index)
        try:
            at = tuple(validate.integer(name, c, minimum=0) for c in chip)
        except TypeError:
            at = ()
        if len(at) != len(self.mesh_shape) or any(
                c >= n for c, n in zip(at, self.mesh_shape, strict=True)):
            raise ArgumentError(f"{name} = {chip!r} is not a chip of the {self.mesh_shape} "
                                "slice; give its coordinates, e.g. (0, 0), or its index.")
        return at

    def permute(self, nbytes: Amount, pairs: Any_) -> Price:
        """A collective-permute: ``nbytes`` from each source to its target at once, ``pairs`` of
        chips (coordinate tuples or row-major indices), each message routed by :mod:`.route`.
        Latency: the longest path's hops × α; bandwidth: the busiest link's bytes / W."""
        from tpviz.core import validate
        from tpviz.errors import ArgumentTypeError

        v = validate.number("nbytes", nbytes, minimum=0)
        try:
            pairs = [tuple(pair) for pair in pairs]
        except TypeError:
            pairs = None
        if pairs is None or any(len(pair) != 2 for pair in pairs):
            raise ArgumentTypeError("pairs must be (source, target) pairs of chips, e.g. "
                                    "[((0, 0), (3, 3))].")
        moves = [(self._chip("source", s), self._chip("target", t)) for s, t in pairs]
        busiest, hops, ports = route(self.mesh_shape, self.wrap, moves, v)
        if not hops:
            return Price("collective-permute", v, 0.0, 0.0, "none")
        return Price("collective-permute", v, hops * self.system.hop_latency,
                     busiest / self.system.link,
                     f"ICI ({hops} hop{'s' * (hops > 1)}, {ports} port{'s' * (ports > 1)})")

    def send(self, nbytes: Amount, source: Any_, target: Any_) -> Price:
        """One message of ``nbytes`` from chip ``source`` to chip ``target``: split over the
        ports that point towards the target (one per axis where they differ), the short way
        round. A v5e 4×4 from (0, 0) to (3, 3): two ports, no wraparound, six hops."""
        return self.permute(nbytes, [(source, target)])

    def collective_time(self, kind: str, nbytes: Amount, axes: Indices | None = None) -> Time:
        """Seconds (latency included) of ``kind`` on V = ``nbytes`` over ``axes``."""
        return self.price(kind, nbytes, axes).seconds

    def dcn_price(self, kind: str, nbytes: float, slices: int) -> Price:
        """``kind`` across ``slices`` slices over DCN, each chip with its own share of DCN: a
        ring over the slices, ``(S - 1)/S · V / W_dcn`` per gather (twice for an all-reduce).
        V = ``nbytes`` is one chip's array. No DCN latency is modelled (none cited)."""
        from tpviz.core import validate

        kind = kind_of(kind)
        s = validate.integer("slices", slices)
        v = validate.number("nbytes", nbytes, minimum=0)
        twice = 2 if kind == "all-reduce" else 1
        once = (s - 1) / s * v / self.system.dcn
        if kind == "all-to-all":
            once = (s - 1) / s / s * v / self.system.dcn
        return Price(kind, v, 0.0, twice * once if kind != "collective-permute" else
                     v / self.system.dcn, "DCN")


def tpu(name: str, mesh_shape: Of(int, Sizes()), wrap: tuple[bool, ...] | None = None
        ) -> TpuSlice:
    """A slice of TPU generation ``name`` ("TPU v4p", "TPU v5e", "TPU v5p", "TPU v6e") of
    ``mesh_shape``,
    with wraparound by the generation's rule (or ``wrap``, one bool per axis, to override).

    Raises:
        ArgumentError: an unknown name, a shape that is not 1–3 positive sizes, or one larger
            than the generation's pod (in chips, or along an axis: a v5e (32, 8) has 256
            chips but no axis of 32).
    """
    from tpviz.core import validate
    from tpviz.errors import ArgumentError, ArgumentTypeError

    system = TPUS[validate.choice("name", name, TPUS)]
    if isinstance(mesh_shape, int):
        mesh_shape = (mesh_shape,)
    if isinstance(mesh_shape, str) or not hasattr(mesh_shape, "__iter__"):
        raise ArgumentTypeError(f"mesh_shape must be a tuple of sizes such as (4, 4), got "
                                f"{mesh_shape!r}.")
    shape = tuple(validate.integer("mesh_shape", n) for n in mesh_shape)
    if not 1 <= len(shape) <= len(system.pod):
        raise ArgumentError(f"mesh_shape = {shape} has {len(shape)} axes; a {name} slice has "
                            f"1 to {len(system.pod)} (its pod is {system.pod}).")
    if math.prod(shape) > math.prod(system.pod):
        raise ArgumentError(f"mesh_shape = {shape} has more chips than a {name} pod "
                            f"{system.pod}; use DCN between slices (dcn_price).")
    longest = sorted(shape, reverse=True)
    if any(n > p for n, p in zip(longest, sorted(system.pod, reverse=True), strict=False)):
        raise ArgumentError(f"mesh_shape = {shape} has an axis longer than the {name} pod "
                            f"{system.pod} allows; give axes that fit in it, e.g. "
                            f"{system.pod}.")
    rule = system.wraparound(shape)
    if wrap is not None:
        rule = tuple(bool(x) for x in wrap)
        if len(rule) != len(shape):
            raise ArgumentError(f"wrap = {wrap!r} needs one bool per axis of {shape}.")
    return TpuSlice(system, shape, rule)
