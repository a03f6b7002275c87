"""Drawings of ZeRO: who holds which slice of each category, and the memory per device."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from tpviz.core.figures import OKABE_ITO, SMALL_PT, TITLE_PT, palette
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import Amount, Axes, Devices, OneOf, Rate, Size
from tpviz.zero.plan import CATEGORIES, PARTITIONED, STAGES, communication, memory

LABELS = {"params": "parameters", "grads": "gradients", "optimizer": "optimizer state"}
COLOURS = {"params": OKABE_ITO[4], "grads": OKABE_ITO[0], "optimizer": OKABE_ITO[2]}


def partitions(devices: Size(64, "the figure draws a row per device") = 4) -> Figure:
    """Stages 0-3 side by side: for each device (row) and category, which part of the vector it
    holds (coloured by device; grey = not held)."""
    colours = palette(devices)
    height = 0.42 * devices + 1.6
    fig = column_figure(height)
    axes = fig.subplots(1, 4)
    fig.subplots_adjust(left=0.05, right=0.99, top=1 - 0.85 / height, bottom=0.3 / height,
                        wspace=0.12)
    for stage, ax in enumerate(axes):
        for d in range(devices):
            for c, category in enumerate(CATEGORIES):
                x0 = c * 1.1
                ax.add_patch(_rect(x0, d, 1.0, "#e6e6e6"))
                if category in PARTITIONED[stage]:
                    ax.add_patch(_rect(x0 + d / devices, d, 1 / devices, colours[d]))
                else:
                    ax.add_patch(_rect(x0, d, 1.0, colours[d]))
        ax.set_xlim(-0.05, 3.25)
        ax.set_ylim(devices, 0)
        ax.set_xticks([0.5, 1.6, 2.7], ["par.", "grad", "opt."], fontsize=SMALL_PT)
        ax.set_yticks([d + 0.5 for d in range(devices)],
                      [f"D{d}" if stage == 0 else "" for d in range(devices)], fontsize=SMALL_PT)
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title({0: "stage 0: data parallel", 1: "stage 1: optimizer",
                      2: "stage 2: + gradients", 3: "stage 3: + parameters"}[stage],
                              fontsize=SMALL_PT)
    fig.suptitle(f"What each of {devices} devices holds: parameters, gradients, optimizer state"
                 "\n(a bar = the whole vector of Ψ values)",
                 fontsize=TITLE_PT, x=0.01, ha="left")
    return fig


def _rect(x, y, w, colour):
    return Rectangle((x, y + 0.12), w, 0.76, facecolor=colour, edgecolor="none")


def memory_bars(params: Amount, devices: Devices, *, capacity: Rate | None = 80e9,
                stage: OneOf(STAGES) | None = None,
                param_bytes: float = 2, grad_bytes: float = 2, optimizer_bytes: float = 12,
                ax: Axes | None = None) -> Figure:
    """Per-device memory of stages 0-3, stacked by category, with the accelerator's memory as a
    line and each stage's communication per step written above its bar."""
    if ax is None:
        fig = column_figure(3.6, 8)  # a fixed layout: constrained layout doubles the time
        ax = fig.subplots()
        fig.subplots_adjust(left=0.1, right=0.98, top=0.86, bottom=0.25)
    sizes = dict(param_bytes=param_bytes, grad_bytes=grad_bytes, optimizer_bytes=optimizer_bytes)
    gb = 1e9
    for s in range(4):
        m = memory(params, devices, s, **sizes)
        bottom = 0.0
        for category, value in zip(CATEGORIES, (m.params, m.grads, m.optimizer), strict=True):
            ax.bar(s, value / gb, bottom=bottom, color=COLOURS[category], width=0.6,
                   label=LABELS[category] if s == 0 else None,
                   edgecolor="black" if s == stage else "none", linewidth=1.5)
            bottom += value / gb
        comm = communication(params, devices, s, param_bytes=param_bytes) / gb
        ax.text(s, bottom, f"{bottom:,.1f} GB\nsends {comm:,.1f} GB/step", ha="center",
                va="bottom", fontsize=SMALL_PT)
    top = max(memory(params, devices, 0, **sizes).total / gb, capacity / gb if capacity else 0)
    if capacity:
        # named in the legend: a label on the line ran into a short bar's words
        ax.axhline(capacity / gb, color=OKABE_ITO[5], linestyle="--", linewidth=1.2,
                   label=f"{capacity / gb:g} GB accelerator")
    ax.set_ylim(0, top * 1.25)
    ax.set_xticks(range(4), ["stage 0\n(data parallel)", "stage 1", "stage 2", "stage 3"])
    ax.set_ylabel("GB per device")
    # under the axis: over the bars it covered a bar's words when the stages are about as tall
    ax.legend(fontsize=SMALL_PT, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=4,
              frameon=False)
    ax.set_title(f"{params / 1e9:g}B parameters on {devices} devices "
                 f"({param_bytes:g} + {grad_bytes:g} + {optimizer_bytes:g} bytes per parameter)",
                 fontsize=TITLE_PT, loc="left")
    return ax.figure
