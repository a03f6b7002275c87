"""Figures of context parallelism, drawn from plans or measured numbers (never recomputed)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from tpviz.context.compare import layer
from tpviz.context.plan import SCHEMES
from tpviz.core.figures import SMALL_PT, palette
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import Devices
from tpviz.errors import TpvizError


def balance(flops: dict[str, list[float]]) -> Figure:
    """Bars of each device's FLOPs, one group per layout (``{"contiguous": [...], ...}``), with
    the mean as a dashed line: the step waits for the tallest bar."""
    fig = column_figure(3.0)
    axes = fig.subplots(1, len(flops), sharey=True, squeeze=False)[0]
    for ax, (name, values) in zip(axes, flops.items(), strict=True):
        values = np.asarray(values, float) / 1e6
        ax.bar(range(len(values)), values, color=palette(len(values)))
        ax.axhline(values.mean(), color="black", linestyle="--", linewidth=1)
        ax.set_title(f"{name}\nbusiest / mean = {values.max() / values.mean():.2f}",
                     fontsize=SMALL_PT)
        ax.set_xlabel("device")
        ax.set_xticks(range(len(values)))
    axes[0].set_ylabel("MFLOPs (cost analysis)")
    fig.tight_layout()
    return fig


COLOURS = dict(zip(SCHEMES, palette(len(SCHEMES)), strict=True))  # one colour per scheme
# and a line style: the schemes drawn later, dashed or dotted, show the ones they lie on (usp
# is Ulysses inside one node; the all-gather's curves run close to SP's)
STYLES = {"sequence": "-", "ring": "-", "ulysses": "-", "allgather": (0, (4, 2)),
          "usp": (0, (1, 1.5))}


def _plain(value: float, _) -> str:
    """A log axis's tick label as plain text: 0.001, 1, 1000, 1e+06."""
    return f"{value:g}"


def scaling(sequences: Sequence[int], heads: int, hidden: int, devices: Devices,
            system: str = "H100 (NVLink)",
            causal: bool = True, kv_heads: int | None = None, legend: bool = True) -> Figure:
    """Per layer and device, against the sequence: exposed communication time and activation
    memory of each scheme in :data:`COLOURS` and :data:`STYLES` (a scheme whose heads do not
    split is left out; ``legend=False`` leaves the key to the caller). The bytes sent grow as
    S for every scheme (:func:`tpviz.context.compare.layer` gives them). Two panels, fixed
    margins, few ticks and plain tick labels (each axes and each text costs): a redraw stays
    inside the widget budget."""
    fig = column_figure(2.8)
    fig.subplots_adjust(left=0.08, right=0.99, top=0.84, bottom=0.18, wspace=0.25)
    axes = fig.subplots(1, 2)
    for scheme in SCHEMES:
        try:
            rows = [layer(scheme, s, heads, hidden, devices, system, causal=causal,
                          kv_heads=kv_heads) for s in sequences]
        except TpvizError:
            continue
        for ax, values in zip(axes, ([r.exposed_s * 1e3 or np.nan for r in rows],  # 0: hidden
                                     [r.memory / 2**30 for r in rows]), strict=True):
            ax.plot(sequences, values, marker="o", markersize=3, color=COLOURS[scheme],
                    linestyle=STYLES[scheme], linewidth=2 if scheme == "ulysses" else 1.5,
                    label=scheme)
    ends = [sequences[0], sequences[-1]]
    for ax, title in zip(axes, ("exposed communication per layer, ms",
                                "activations per layer, GiB"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ends, [f"{s // 1024}k" for s in ends])
        ax.set_xticks(sequences, minor=True)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(LogLocator(numticks=4))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(_plain))  # no mathtext: fast to lay out
        ax.set_title(title, fontsize=SMALL_PT)
        ax.tick_params(labelsize=SMALL_PT)
    fig.text(0.5, 0.02, "sequence S (tokens)", ha="center", fontsize=SMALL_PT)
    if legend:
        axes[0].legend(fontsize=SMALL_PT - 1, handlelength=1.2, borderpad=0.3,
                       labelspacing=0.2)
    return fig
