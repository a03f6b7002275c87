"""The three ways to split the sequence as plans: collectives and work per device (no devices).

Notation (``book/notation.md``): S sequence, B batch, H = n_h · d_h hidden, N devices of the
context axis, b bytes per value. Per attention layer, forward pass:

========== ============================================ ===========================================
scheme     collectives (each device)                     bytes each device sends
========== ============================================ ===========================================
sequence   all-gather of [B, S, H], reduce-scatter to    2 (N-1)/N · B S H b  (Megatron's
           [B, S/N, H] (Korthikanti et al. 2023)          all-reduce: the same)
ring       N - 1 permutes of the key/value block          (N-1) · 2 B (S/N) H b
           [2, B, S/N, n_h, d_h] (Liu et al. 2023)
ulysses    4 all-to-alls of [B, S/N, H]: q, k, v to       4 (N-1)/N · B (S/N) H b
           heads, the output back (Jacobs et al. 2023)
========== ============================================ ===========================================

The backward pass holds the transposes: a reduce-scatter and an all-gather (sequence), N - 1
permutes of the keys' and values' gradients (ring), 4 all-to-alls (Ulysses).
"""

from __future__ import annotations

import numpy as np

from tpviz.core import validate
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import HELD, Devices, Dtype, Size
from tpviz.core.layout import dtype_of, dtype_size
from tpviz.errors import ShardingError

AXIS = "context"
SCHEMES = ("sequence", "ring", "ulysses")
LAYOUTS = ("contiguous", "zigzag")


def check_sizes(scheme: str, sequence: int, heads: int, devices: int,
                hidden: int | None = None, layout: str = "contiguous") -> tuple:
    """The arguments as plain values, or an error naming the one that does not fit.

    Raises:
        ArgumentError: a scheme or layout that is not one of the choices, or a size that is
            not a positive integer.
        ShardingError: the sequence does not split into N (zigzag: 2N) equal chunks, the heads
            do not split over the devices (sequence, ulysses) or the hidden size over the heads.
    """
    scheme = validate.choice("scheme", scheme, SCHEMES)
    layout = validate.choice("layout", layout, LAYOUTS)
    s, a, n = (validate.integer(k, v, error=ShardingError) for k, v in
               (("sequence", sequence), ("heads", heads), ("devices", devices)))
    chunks = 2 * n if layout == "zigzag" else n
    if s % chunks:
        raise ShardingError(f"sequence = {s} does not split into {chunks} equal chunks "
                            f"({'2 per device, zigzag' if layout == 'zigzag' else 'one per device'}"
                            f"); use a sequence divisible by {chunks}.")
    if scheme != "ring" and a % n:
        why = ("Ulysses gives each device whole heads (n_h ≥ N)" if scheme == "ulysses" else
               "Megatron splits the heads over the tensor-parallel devices")
        raise ShardingError(f"heads = {a} do not split over devices = {n}: {why}. Use a device "
                            f"count that divides {a}, or the ring scheme, which splits only "
                            "the sequence.")
    if hidden is not None:
        hidden = validate.integer("hidden", hidden, error=ShardingError)
        if hidden % a:
            raise ShardingError(f"hidden = {hidden} is not divisible by heads = {a}; each head "
                                "is hidden / heads wide.")
    return scheme, s, a, n, hidden, layout


def plan(scheme: str, sequence: int, heads: int, hidden: int, devices: Devices, *,
         batch: int = 1, dtype: Dtype = "float32", training: bool = False) -> Collectives:
    """The collectives one attention layer's forward pass (with ``training``: forward and
    backward) holds on each of ``devices`` devices (see the module's table).

    Example:
        >>> plan("ring", 1024, 8, 64, 8).kinds()
        Counter({'collective-permute': 7})

    Raises:
        ArgumentError, ShardingError: see :func:`check_sizes`.
    """
    hidden = validate.integer("hidden", hidden, error=ShardingError)
    scheme, s, a, n, h, _ = check_sizes(scheme, sequence, heads, devices, hidden)
    b = validate.integer("batch", batch, error=ShardingError)
    size, name = dtype_size(dtype), str(dtype_of(dtype))
    if n == 1:
        return Collectives()
    c, d = s // n, h // a
    if scheme == "sequence":
        gather = Collective("all-gather", b * s * h * size, n, name, (b, s, h), (AXIS,),
                            what="layer-norm output [B, S, H], before the Q, K, V projections")
        scatter = Collective("reduce-scatter", b * c * h * size, n, name, (b, c, h), (AXIS,),
                             what="output projection's partial sums, to [B, S/N, H]")
        return Collectives([gather, scatter] + ([scatter, gather] if training else []))
    if scheme == "ring":
        one = Collective("collective-permute", 2 * b * c * h * size, n, name, (2, b, c, a, d),
                         (AXIS,), what="keys and values [2, B, S/N, n_h, d_h], to the next "
                                       "device")
        return Collectives([one] * ((n - 1) * (2 if training else 1)))
    to_heads = Collective("all-to-all", b * c * h * size, n, name, (b, s, a // n, d), (AXIS,),
                          what="q, k or v: [B, S/N, n_h, d_h] to [B, S, n_h/N, d_h]")
    return Collectives([to_heads] * (8 if training else 4))


def zigzag_order(sequence: Size(2**24, HELD), devices: Devices) -> np.ndarray:
    """The token order of the zigzag layout: the sequence in 2N chunks, device i holding
    chunks i and 2N-1-i (Brandon et al.'s striped attention balances the same way)."""
    _, sequence, _, devices, _, _ = check_sizes("ring", sequence, 1, devices, layout="zigzag")
    chunks = np.arange(sequence).reshape(2 * devices, -1)
    return np.concatenate([np.concatenate([chunks[i], chunks[2 * devices - 1 - i]])
                           for i in range(devices)])


def causal_work(devices: Devices, layout: str = "contiguous") -> list[int]:
    """Chunk pairs (a query chunk of S/(2N) tokens against a key chunk of as many) each device
    computes in causal ring attention when it skips every block the mask hides entirely and
    computes a block the mask cuts in full. Contiguous: device i computes its i earlier blocks
    and its own, 4(i+1) pairs: the last device 4N, the first 4. Zigzag: its own two chunks
    (4 pairs) and then half a block per step (2 pairs), 2N + 2 on every device."""
    n = validate.integer("devices", devices, error=ShardingError)
    layout = validate.choice("layout", layout, LAYOUTS)
    return [4 * (i + 1) if layout == "contiguous" else 2 * n + 2 for i in range(n)]
