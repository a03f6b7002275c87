"""The sharded decode step of :mod:`tpviz.inference.run` as a plan: the collectives each device
runs and the bytes it holds (pure Python, no devices).

Per layer, float32, with x ``[B, H]`` whole on every device (b = 4 bytes):

========= ============================================================ =======================
scheme    collectives per layer (result bytes per device)               cache per device
========= ============================================================ =======================
heads     2 all-reduces of ``[B, H]``: B H b                            1/N of it, or 1/n_kv
                                                                         when n_kv < N
batch     2 all-to-alls (queries out, outputs back): (B/N) n_h d_h b;   1/N
          2 all-reduces
sequence  an all-gather of the queries: B n_h d_h b; an all-reduce      1/N
          (max) of ``lse[B, n_h]``; an all-reduce (sum) of
          ``[B, n_h, d_h + 1]``; 2 all-reduces
========= ============================================================ =======================
"""

from __future__ import annotations

from tpviz.core import validate
from tpviz.core.collectives import Collective, Collectives
from tpviz.errors import ShardingError
from tpviz.inference.model import Config
from tpviz.inference.run import AXIS, SCHEMES, slots

FLOAT = 4  # bytes: the small model runs in float32


def check_sizes(scheme: str, config: Config, devices: int) -> tuple[str, int]:
    """The scheme and device count, or an error naming what does not split.

    Raises:
        ArgumentError: a scheme that is not one of ``SCHEMES``.
        ShardingError: N does not divide the query heads, the MLP's width, the batch (batch
            scheme) or the context (sequence scheme), or n_kv and N do not divide each other
            (heads scheme).
    """
    scheme = validate.choice("scheme", scheme, SCHEMES)
    n = validate.integer("devices", devices, error=ShardingError)
    c = config
    need = {"query heads": c.heads, "the MLP's width F": c.ffn}
    if scheme == "batch":
        need["batch"] = c.batch
    if scheme == "sequence":
        need["context"] = c.context
    for what, size in need.items():
        if size % n:
            raise ShardingError(f"devices = {n} do not split {what} = {size}; use a device "
                                f"count that divides {size}.")
    if scheme == "heads" and c.kv_heads % n and n % c.kv_heads:
        raise ShardingError(f"devices = {n} and kv_heads = {c.kv_heads}: each device needs whole "
                            "key/value heads, or whole replicas of one; use counts that divide "
                            "each other.")
    return scheme, n


def plan(scheme: str, config: Config, devices: int) -> Collectives:
    """The collectives of one sharded decode step (all layers), with their per-device bytes."""
    scheme, n = check_sizes(scheme, config, devices)
    c = config
    if n == 1:
        return Collectives()
    x = Collective("all-reduce", c.batch * c.hidden * FLOAT, n, "float32", (c.batch, c.hidden),
                   (AXIS,), what="partial sums of x[B, H] (attention's W_O, then the MLP's W_2)")
    layer = [x, x]
    if scheme == "batch":
        a2a = Collective("all-to-all", c.batch // n * c.heads * c.head_dim * FLOAT, n, "float32",
                         (c.batch // n, c.heads, c.head_dim), (AXIS,),
                         what="queries to their sequences' device, outputs back")
        layer += [a2a, a2a]
    if scheme == "sequence":
        layer += [Collective("all-gather", c.batch * c.heads * c.head_dim * FLOAT, n, "float32",
                             (c.batch, c.heads, c.head_dim), (AXIS,), what="the queries"),
                  Collective("all-reduce", c.batch * c.heads * FLOAT, n, "float32",
                             (c.batch, c.heads), (AXIS,), what="max of lse[B, n_h]"),
                  Collective("all-reduce", c.batch * c.heads * (c.head_dim + 1) * FLOAT, n,
                             "float32", (c.batch, c.heads, c.head_dim + 1), (AXIS,),
                             what="Σ w_i o_i and Σ w_i")]
    return Collectives(layer * c.layers)


def cache_per_device(scheme: str, config: Config, devices: int) -> int:
    """Bytes of the cache one device holds (the heads scheme keeps N/n_kv replicas when
    n_kv < N)."""
    scheme, n = check_sizes(scheme, config, devices)
    whole = config.cache_bytes()
    if scheme == "heads":
        return whole * slots(config, n) // config.kv_heads // n
    return whole // n


def weights_per_device(scheme: str, config: Config, devices: int) -> int:
    """Bytes of the weights one device holds: W_Q, W_O and the MLP split N ways; W_K, W_V split
    (heads scheme) or whole; embeddings, norms and the output matrix whole."""
    scheme, n = check_sizes(scheme, config, devices)
    c = config
    whole = c.vocab * c.hidden * 2 + c.context * c.hidden + c.hidden * (1 + 2 * c.layers)
    split = c.layers * (2 * c.hidden * c.heads * c.head_dim + 3 * c.hidden * c.ffn) // n
    kv = 2 * c.layers * c.hidden * c.head_dim * (slots(c, n) // n if scheme == "heads"
                                                 else c.kv_heads)
    return FLOAT * (whole + split + kv)
