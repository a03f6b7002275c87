"""The ways to split the sequence as plans: collectives and work per device (no devices).

Notation (``book/notation.md``): S sequence, B batch, H = n_h · d_h hidden, n_h query heads and
n_kv key/value heads (grouped-query attention; φ = n_kv / n_h, 1 without it), N devices of the
context axis, b bytes per value. Per attention layer, forward pass:

========== ============================================ ===========================================
scheme     collectives (each device)                     bytes each device sends
========== ============================================ ===========================================
sequence   all-gather of [B, S, H], reduce-scatter to    2 (N-1)/N · B S H b  (Megatron's
           [B, S/N, H] (Korthikanti et al. 2023)          all-reduce: the same)
ring       N - 1 permutes of the key/value block          (N-1) · 2 φ B (S/N) H b
           [2, B, S/N, n_kv, d_h] (Liu et al. 2023)
ulysses    4 all-to-alls: q and the output [B, S/N, H],   (N-1)/N · B (S/N) H b · (2 + 2φ)
           k and v [B, S/N, n_kv d_h] (Jacobs et al.)
allgather  one all-gather of [2, B, S, n_kv, d_h]         (N-1)/N · 2 φ B S H b: the ring's bytes,
           (Llama 3's CP: K and V gathered, then          sent before the attention instead of
           attention of the local queries)                beside it
usp        Ulysses over u devices (4 all-to-alls) and     Ulysses' over u plus the ring's over
           a ring over r = N/u (Fang & Zhao 2024)         r, on blocks of n_kv/u heads
========== ============================================ ===========================================

So Ulysses sends φN/(1 + φ) times fewer bytes than the ring: N/2 without grouped-query attention,
but 0.89 at φ = 1/8 and N = 8 (the ring then sends fewer). That is the forward pass; with the
backward below (the ring's recomputing one) it is (3N - 2)φN / (2(N - 1)(1 + φ)): 1.4 there.

The backward pass (``training``) holds the transposes: a reduce-scatter and an all-gather
(sequence; with ``regather``, Megatron's extra all-gather of the stored input shard), 4
all-to-alls (Ulysses), a reduce-scatter of dK and dV (allgather). Ring attention's backward
depends on what the forward kept: with ``recompute`` (Liu et al.'s backward, the default) the
keys and values go round again, N - 1 permutes, and their gradients travel with them, N
permutes (the last brings each block's gradient home): (2N - 1)/(N - 1) times the forward's
bytes. Without it (autodiff, every block's scores saved) only dK and dV travel, N - 1 permutes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tpviz.core import validate
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import HELD, Devices, Dtype, Size
from tpviz.core.layout import dtype_of, dtype_size
from tpviz.errors import ArgumentError, ShardingError

AXIS = "context"
RING_AXIS, ULYSSES_AXIS = "ring", "ulysses"  # the two axes of the usp (hybrid) mesh
SCHEMES = ("sequence", "ring", "ulysses", "allgather", "usp")
LAYOUTS = ("contiguous", "zigzag", "striped")
# the layouts each scheme can use: the ones that see the whole sequence after a gather or an
# all-to-all over all N devices keep the plain order
ALLOWED = {"sequence": ("contiguous",), "ulysses": ("contiguous",),
           "ring": LAYOUTS, "allgather": LAYOUTS, "usp": ("contiguous", "zigzag")}


@dataclass(frozen=True)
class Sizes:
    """A layer's sizes, checked: ``kv_heads`` n_kv, ``ulysses`` u (usp's Ulysses degree; 1 for
    the other schemes) and ``ring`` r = N/u."""

    scheme: str
    sequence: int
    heads: int
    devices: int
    hidden: int | None
    layout: str
    kv_heads: int
    ulysses: int = 1

    @property
    def ring(self) -> int:
        return self.devices // self.ulysses


def default_ulysses(devices: int, heads: int, kv_heads: int, node: int = 0) -> int:
    """usp's default Ulysses degree u: the largest divisor of N that divides both head counts
    (and, given ``node`` > 0, is at most the devices of one node)."""
    g = math.gcd(heads, kv_heads)
    cap = node if node else devices
    return max(u for u in range(1, devices + 1) if devices % u == 0 and g % u == 0 and u <= cap)


def check_sizes(scheme: str, sequence: int, heads: int, devices: int,
                hidden: int | None = None, layout: str = "contiguous", *,
                kv_heads: int | None = None, ulysses: int | None = None) -> Sizes:
    """The arguments as a :class:`Sizes`, or an error naming the one that does not fit.

    Raises:
        ArgumentError: a scheme or layout that is not one of the choices, or a size that is
            not a positive integer.
        ShardingError: the sequence does not split into N (zigzag: 2N) equal chunks, the heads
            (or key/value heads) do not split over the devices (sequence, ulysses) or over u
            (usp), the key/value heads do not divide the heads, a layout the scheme cannot
            use, or the hidden size does not split over the heads.
    """
    scheme = validate.choice("scheme", scheme, SCHEMES)
    layout = validate.choice("layout", layout, LAYOUTS)
    s, a, n = (validate.integer(k, v, error=ShardingError) for k, v in
               (("sequence", sequence), ("heads", heads), ("devices", devices)))
    kv = a if kv_heads is None else validate.integer("kv_heads", kv_heads, error=ShardingError)
    if a % kv:
        raise ShardingError(f"kv_heads = {kv} does not divide heads = {a}: in grouped-query "
                            "attention each key/value head serves heads / kv_heads query "
                            "heads. Use a divisor of the heads.")
    if layout not in ALLOWED[scheme]:
        raise ShardingError(f"layout = {layout!r} is not for the {scheme} scheme: it sees the "
                            f"whole sequence after its gather; use one of {ALLOWED[scheme]}.")
    chunks = 2 * n if layout == "zigzag" else n
    if s % chunks:
        raise ShardingError(f"sequence = {s} does not split into {chunks} equal chunks "
                            f"({'2 per device, zigzag' if layout == 'zigzag' else 'one per device'}"
                            f"); use a sequence divisible by {chunks}.")
    u = 1
    if scheme == "usp":
        u = (default_ulysses(n, a, kv) if ulysses is None else
             validate.integer("ulysses", ulysses, error=ShardingError))
        if n % u:
            raise ShardingError(f"ulysses = {u} does not divide devices = {n}: usp runs "
                                "Ulysses over u devices and a ring over N/u; use a divisor.")
    split = n if scheme in ("sequence", "ulysses") else u
    for name, count in (("heads", a), ("kv_heads", kv)):
        if split > 1 and count % split:
            why = {"ulysses": "Ulysses gives each device whole heads (n_h ≥ N)",
                   "usp": "usp's Ulysses part gives each of its u devices whole heads",
                   "sequence": "Megatron splits the heads over the tensor-parallel devices"}
            over = f"devices = {n}" if split == n else f"ulysses = {split}"
            raise ShardingError(f"{name} = {count} do not split over {over}: "
                                f"{why[scheme]}. Use a device count that divides {count}, or "
                                "the ring scheme, which splits only the sequence.")
    if hidden is not None:
        hidden = validate.integer("hidden", hidden, error=ShardingError)
        if hidden % a:
            raise ShardingError(f"hidden = {hidden} is not divisible by heads = {a}; each head "
                                "is hidden / heads wide.")
    return Sizes(scheme, s, a, n, hidden, layout, kv, u)


def plan(scheme: str, sequence: int, heads: int, hidden: int, devices: Devices, *,
         batch: int = 1, dtype: Dtype = "float32", training: bool = False,
         kv_heads: int | None = None,
         ulysses: int | None = None, recompute: bool = True,
         regather: bool = False) -> Collectives:
    """The collectives one attention layer's forward pass (with ``training``: forward and
    backward) holds on each of ``devices`` devices (see the module's table).

    Args:
        kv_heads: n_kv, key/value heads (grouped-query attention; default: ``heads``).
        ulysses: usp's Ulysses degree u (default: :func:`default_ulysses`).
        recompute: ring (and usp's ring): the backward recomputes each block, so the keys and
            values travel again beside their gradients (Liu et al.); False: autodiff's backward,
            which saved every block.
        regather: sequence: the backward all-gathers the stored input shard again (Megatron)
            instead of keeping the gathered input.

    Example:
        >>> plan("ring", 1024, 8, 64, 8).kinds()
        Counter({'collective-permute': 7})

    Raises:
        ArgumentError, ShardingError: see :func:`check_sizes`.
    """
    hidden = validate.integer("hidden", hidden, error=ShardingError)
    z = check_sizes(scheme, sequence, heads, devices, hidden, kv_heads=kv_heads, ulysses=ulysses)
    b = validate.integer("batch", batch, error=ShardingError)
    training, recompute, regather = (validate.flag(k, v) for k, v in (
        ("training", training), ("recompute", recompute), ("regather", regather)))
    size, name = dtype_size(dtype), str(dtype_of(dtype))
    n, s, h, a, kv = z.devices, z.sequence, hidden, z.heads, z.kv_heads
    d = h // a
    if n == 1:
        return Collectives()
    c = s // n
    if z.scheme == "sequence":
        gather = Collective("all-gather", b * s * h * size, n, name, (b, s, h), (AXIS,),
                            what="layer-norm output [B, S, H], before the Q, K, V projections")
        scatter = Collective("reduce-scatter", b * c * h * size, n, name, (b, c, h), (AXIS,),
                             what="output projection's partial sums, to [B, S/N, H]")
        again = Collective("all-gather", b * s * h * size, n, name, (b, s, h), (AXIS,),
                           what="the stored input shard gathered again, for dW_QKV")
        back = [scatter, gather] + ([again] if regather else [])
        return Collectives([gather, scatter] + (back if training else []))
    if z.scheme == "allgather":
        gathered = Collective("all-gather", 2 * b * s * kv * d * size, n, name, (2, b, s, kv, d),
                              (AXIS,), what="keys and values [2, B, S, n_kv, d_h]")
        grads = Collective("reduce-scatter", 2 * b * c * kv * d * size, n, name,
                           (2, b, c, kv, d), (AXIS,), what="dK and dV, to [2, B, S/N, n_kv, d_h]")
        return Collectives([gathered] + ([grads] if training else []))
    if z.scheme == "ring":
        return _ring(n, 2 * b * c * kv * d * size, name, (2, b, c, kv, d), (AXIS,), training,
                     recompute)
    u, r = z.ulysses, z.ring
    if z.scheme == "ulysses":
        u, r = n, 1
    axes = (AXIS,) if z.scheme == "ulysses" else (ULYSSES_AXIS,)
    q = Collective("all-to-all", b * c * h * size, u, name, (b, c * u, a // u, d), axes,
                   what="q or the output: [B, S/N, n_h, d_h] to [B, uS/N, n_h/u, d_h] or back")
    k = Collective("all-to-all", b * c * kv * d * size, u, name, (b, c * u, kv // u, d), axes,
                   what="k or v: [B, S/N, n_kv, d_h] to [B, uS/N, n_kv/u, d_h]")
    to_heads = Collectives([q, k, k, q] * (2 if training else 1)) if u > 1 else Collectives()
    block = 2 * b * (s // r) * (kv // u) * d * size
    ring = _ring(r, block, name, (2, b, s // r, kv // u, d), (RING_AXIS,), training, recompute,
                 senders=n)
    return Collectives(list(to_heads) + list(ring))


def _ring(n: int, block: int, dtype: str, shape: tuple, axes: tuple, training: bool,
          recompute: bool, senders: int | None = None) -> Collectives:
    """Rings of ``n`` devices: N - 1 permutes of the key/value block forward; backward, the
    gradients (and, recomputing, the blocks again) round the ring. A permute's group size is
    the devices that send (``senders``: usp's N, in N/n rings of n)."""
    if n == 1:
        return Collectives()
    group = senders or n
    kv = Collective("collective-permute", block, group, dtype, shape, axes,
                    what="keys and values [2, B, S/N, n_kv, d_h], to the next device")
    grads = Collective("collective-permute", block, group, dtype, shape, axes,
                       what="dK and dV of the block, with it (the last: home)")
    back = ([kv] * (n - 1) + [grads] * n) if recompute else [grads] * (n - 1)
    return Collectives([kv] * (n - 1) + (back if training else []))


def zigzag_order(sequence: Size(2**24, HELD), devices: Devices) -> np.ndarray:
    """The token order of the zigzag layout: the sequence in 2N chunks, device i holding
    chunks i and 2N-1-i, an early and a late one (the layout of ring-attention codes and of
    Llama 3's context parallelism). Not striped attention's layout: see :func:`striped_order`."""
    z = check_sizes("ring", sequence, 1, devices, layout="zigzag")
    sequence, devices = z.sequence, z.devices
    chunks = np.arange(sequence).reshape(2 * devices, -1)
    return np.concatenate([np.concatenate([chunks[i], chunks[2 * devices - 1 - i]])
                           for i in range(devices)])


def striped_order(sequence: Size(2**24, HELD), devices: Devices) -> np.ndarray:
    """The token order of striped attention (Brandon et al. 2023): token t on device t mod N,
    so device i holds tokens i, i + N, i + 2N, ... (no chunks: a stripe of single tokens)."""
    z = check_sizes("ring", sequence, 1, devices, layout="striped")
    return np.arange(z.sequence).reshape(-1, z.devices).T.ravel()


def order(sequence: int, devices: int, layout: str) -> np.ndarray:
    """The token order of ``layout``: device i holds positions ``order[i·S/N:(i+1)·S/N]``."""
    layout = validate.choice("layout", layout, LAYOUTS)
    if layout == "zigzag":
        return zigzag_order(sequence, devices)
    if layout == "striped":
        return striped_order(sequence, devices)
    return np.arange(check_sizes("ring", sequence, 1, devices).sequence)


def causal_work(devices: Devices, layout: str = "contiguous", tiles: int = 1) -> list[int]:
    """Tiles each device computes in causal ring attention, over its whole ring: a kernel that
    cuts each block of S/N × S/N scores into ``tiles`` × ``tiles`` tiles skips every tile the
    mask hides entirely and computes a tile the mask cuts in full (FlashAttention's
    granularity). With t = ``tiles``:

    - contiguous: device i computes its i earlier blocks whole and the lower triangle of its
      own, i·t² + t(t+1)/2 (with t = 1: i + 1 blocks, so the last device does 2N/(N+1) of the
      mean; as t grows, 2 - 1/N);
    - zigzag (t even, or 1): its own block's triangle, then half a block per step,
      t(t+1)/2 + (N-1)·t²/2 on every device (t = 2: 2N + 1);
    - striped: every step's block, its own included, is a stripe of the whole sequence whose
      mask is a triangle: N·t(t+1)/2 on every device (t = 2: 3N).

    With t = 1 (whole blocks) zigzag and striped compute N blocks each and skip nothing; at
    t = 2, the programs of :mod:`tpviz.context.ring`, striped computes 3N/(2N + 1) times
    zigzag's work, and the excess falls towards 1 as t grows.

    Raises:
        ArgumentError: an unknown layout, or an odd ``tiles`` > 1 for zigzag (a tile would
            straddle its two chunks).
    """
    n = validate.integer("devices", devices, error=ShardingError)
    layout = validate.choice("layout", layout, LAYOUTS)
    t = validate.integer("tiles", tiles, maximum=2**12)
    triangle = t * (t + 1) // 2
    if layout == "striped":
        return [n * triangle] * n
    if layout == "zigzag":
        if t == 1:
            return [n] * n
        if t % 2:
            raise ArgumentError(f"tiles = {t} is odd: a zigzag block is two chunks, and a tile "
                                "would straddle them; use 1 or an even number.")
        return [triangle + (n - 1) * t * t // 2] * n
    return [i * t * t + triangle for i in range(n)]
