"""Figures of context parallelism, drawn from plans or measured numbers (never recomputed)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from tpviz.context.compare import layer
from tpviz.context.plan import SCHEMES
from tpviz.core.figures import SMALL_PT, palette
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import Devices


def balance(flops: dict[str, list[float]]) -> Figure:
    """Bars of each device's FLOPs, one group per layout (``{"contiguous": [...], ...}``), with
    the mean as a dashed line: the step waits for the tallest bar."""
    fig = column_figure(2.8)
    axes = fig.subplots(1, len(flops), sharey=True, squeeze=False)[0]
    for ax, (name, values) in zip(axes, flops.items(), strict=True):
        values = np.asarray(values, float) / 1e6
        ax.bar(range(len(values)), values, color=palette(len(values)))
        ax.axhline(values.mean(), color="black", linestyle="--", linewidth=1)
        ax.set_title(f"{name}: busiest / mean = {values.max() / values.mean():.2f}", fontsize=10)
        ax.set_xlabel("device")
        ax.set_xticks(range(len(values)))
    axes[0].set_ylabel("MFLOPs (cost analysis)")
    fig.tight_layout()
    return fig


def scaling(sequences: Sequence[int], heads: int, hidden: int, devices: Devices,
            system: str = "H100 (NVLink)",
            causal: bool = True) -> Figure:
    """Per layer and device, against the sequence: bytes sent, exposed communication time and
    activation memory of each scheme (a scheme that cannot split the heads is left out)."""
    fig = column_figure(3.2)
    axes = fig.subplots(1, 3)
    colours = dict(zip(SCHEMES, palette(3), strict=True))
    for scheme in SCHEMES:
        if scheme != "ring" and heads % devices:
            continue
        rows = [layer(scheme, s, heads, hidden, devices, system, causal=causal)
                for s in sequences]
        for ax, values in zip(axes, ([r.sent_bytes / 2**20 for r in rows],
                                     [r.exposed_s * 1e3 for r in rows],
                                     [r.memory / 2**30 for r in rows]), strict=True):
            ax.plot(sequences, values, marker="o", color=colours[scheme], label=scheme)
    for ax, title in zip(axes, ("MiB sent", "exposed communication, ms", "activations, GiB"),
                         strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence S", fontsize=SMALL_PT)
        ax.set_title(title.replace(", ", ",\n"), fontsize=SMALL_PT)
        ax.tick_params(labelsize=SMALL_PT)
    axes[0].legend(fontsize=SMALL_PT)
    fig.tight_layout()
    return fig
