"""``explore_megatron``: devices, hidden size, heads, tokens → the block's shapes and bytes."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core import validate
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.core.widgets import Controls, Live, live
from tpviz.megatron.draw import mlp
from tpviz.megatron.plan import plan


def render_megatron(devices: int, hidden: int, ffn_ratio: int, heads: int, tokens: int,
                    dtype: str) -> Figure:
    """The figure ``explore_megatron`` shows: the sharded MLP and the block's budget."""
    hidden = validate.integer("hidden", hidden)
    ffn_ratio = validate.integer("ffn_ratio", ffn_ratio)
    p = plan(tokens, hidden, ffn_ratio * hidden, heads, devices, dtype)
    mb = 2**20
    return mlp(p, footer=(
        f"whole block (attention + MLP): weights {p.weight_bytes / mb:,.1f} MiB, "
        f"{p.weight_bytes_per_device / mb:,.1f} MiB per device,\n{p.heads // devices} of "
        f"{p.heads} heads per device; per training step: {p.forward_all_reduces} + "
        f"{p.backward_all_reduces} all-reduces of {p.all_reduce_bytes / mb:,.2f} MiB\n→ each "
        f"device sends {p.ring_bytes_per_step / mb:,.2f} MiB (ring)"))


def explore_megatron(devices: int = 4, hidden: int = 1024, ffn_ratio: int = 4, heads: int = 16,
                     tokens: int = 2048, dtype: str = "bf16") -> Live:
    """Devices, hidden size, heads and tokens → per-device shapes, bytes communicated per layer
    and weight memory per device of a Megatron transformer block."""
    c = Controls("explore_megatron")
    controls = {
        "devices": c.dropdown("devices", devices, [1, 2, 4, 8, 16], "devices N"),
        "hidden": c.select_slider("hidden", hidden, [256, 512, 1024, 2048, 4096, 8192, 12288],
                                  "hidden H"),
        "ffn_ratio": c.int_slider("ffn_ratio", ffn_ratio, 1, 8, "F / H"),
        "heads": c.select_slider("heads", heads, [4, 8, 12, 16, 32, 64, 96], "heads"),
        "tokens": c.select_slider("tokens", tokens, [256, 512, 1024, 2048, 4096, 8192],
                                  "tokens (batch × seq)"),
        "dtype": c.dropdown("dtype", dtype, ["bf16", "float32"], "dtype"),
    }
    return live(controls, render_megatron, figure=LIVE)


def megatron_rows(devices: int, hidden: int, ffn_ratio: int, heads: int, tokens: int,
                  dtype: str) -> list[dict]:
    """The live figure's rows (from :func:`tpviz.megatron.plan.plan`): MiB of weights and of
    communication per device, and each device's share in words."""
    p, mb = plan(tokens, hidden, ffn_ratio * hidden, heads, devices, dtype), 2**20
    f = ffn_ratio * hidden
    return bar_rows([
        ("weights of the block, whole", p.weight_bytes / mb, f"{p.weight_bytes / mb:,.1f} MiB"),
        ("weights per device", p.weight_bytes_per_device / mb,
         f"{p.weight_bytes_per_device / mb:,.1f} MiB (1/{devices})", True),
        ("one all-reduce [tokens, H]", p.all_reduce_bytes / mb,
         f"{p.all_reduce_bytes / mb:,.2f} MiB"),
        ("sent per device per step (ring)", p.ring_bytes_per_step / mb,
         f"{p.ring_bytes_per_step / mb:,.2f} MiB", True)],
        [f"each device holds W₁[{hidden:,}, {f // devices:,}] and W₂[{f // devices:,}, "
         f"{hidden:,}] of the MLP and {heads // devices} of {heads} heads",
         f"per step: {p.forward_all_reduces} + {p.backward_all_reduces} all-reduces "
         f"(forward + backward) of {p.all_reduce_bytes / mb:,.2f} MiB each"])


LIVE = LiveFigure(
    controls={"devices": Grid([1, 2, 4, 8, 16], "devices N", start=4),
              "hidden": Grid([512, 1024, 2048, 4096, 8192], "hidden H", start=1024),
              "ffn_ratio": Grid([2, 4, 8], "F / H", start=4),
              "heads": Grid([12, 16, 32], "heads", start=16),
              "tokens": Grid([512, 2048, 8192], "tokens (batch × seq)", start=2048),
              "dtype": Grid(["bf16", "float32"], "dtype")},
    rows=megatron_rows, chart=lambda base: words_and_bars(base, "MiB"))


# settings the benchmarks time: the defaults and the largest the widget offers
BENCHMARKS = [(render_megatron, dict(devices=4, hidden=1024, ffn_ratio=4, heads=16, tokens=2048,
                                     dtype="bf16")),
              (render_megatron, dict(devices=16, hidden=12288, ffn_ratio=8, heads=96,
                                     tokens=8192, dtype="bf16"))]
