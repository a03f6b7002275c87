"""Drawings of a routed MoE layer: tokens sent to experts on devices, and load against capacity.

Both take a :class:`tpviz.moe.plan.Routing` (NumPy; no devices): nothing is recomputed here.
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from tpviz.core.figures import OKABE_ITO, SMALL_PT, palette
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import Axes, Devices
from tpviz.moe.plan import Routing

DROPPED = OKABE_ITO[5]  # vermilion
DROPPED_FILL = "#FBE0D5"  # a pale vermilion (hatching would cost the widget ~30 ms)


def _positions(count: int, groups: int, span: float) -> np.ndarray:
    """``count`` places along ``span`` in ``groups`` blocks with a gap between blocks."""
    per = count // groups
    gap = 0.6
    step = span / (count + gap * (groups - 1))
    index = np.arange(count)
    return (index + gap * (index // per)) * step + step / 2


def routing(r: Routing, devices: Devices, title: str = "") -> Figure:
    """Tokens (left, one block per device: the device's group) routed to experts (right, E/N
    per device). Solid lines: kept choices (dispatch sends the token along the line, combine
    sends the result back); dashed vermilion lines ending in ×: choices dropped by capacity."""
    t, k = r.experts.shape
    e = r.probs.shape[1]
    span = float(max(t, e))
    ty, ey = _positions(t, devices, span), _positions(e, devices, span)
    fig = column_figure(min(7.0, 1.6 + 0.11 * span), 7.0)
    ax = fig.subplots()
    fig.subplots_adjust(left=0.02, right=0.98, top=0.9, bottom=0.03)
    colours = palette(devices)
    token_device = np.arange(t) // (t // devices)
    expert_device = np.arange(e) // (e // devices)
    for d in range(devices):  # a box for each device: its tokens on the left, experts right
        for xs, ys, owner in ((0.0, ty, token_device), (1.0, ey, expert_device)):
            mine = ys[owner == d]
            ax.add_patch(Rectangle((xs - 0.09, mine.min() - 0.45), 0.18,
                                   mine.max() - mine.min() + 0.9, facecolor=colours[d],
                                   alpha=0.25, edgecolor="none"))
            ax.text(xs + (-0.11 if xs == 0 else 0.11), mine.mean(), f"D{d}", fontsize=SMALL_PT,
                    ha="right" if xs == 0 else "left", va="center")
    kept_lines, kept_colours, dropped_lines = [], [], []
    for tok in range(t):
        for j in range(k):
            seg = [(0.09, ty[tok]), (0.91, ey[r.experts[tok, j]])]
            if r.keep[tok, j]:
                kept_lines.append(seg)
                kept_colours.append(colours[token_device[tok]])
            else:
                dropped_lines.append(seg)
    ax.add_collection(LineCollection(kept_lines, colors=kept_colours, linewidths=1.0))
    ax.add_collection(LineCollection(dropped_lines, colors=DROPPED, linewidths=1.0,
                                     linestyles="dashed"))
    if dropped_lines:
        start = np.array([s[0] for s in dropped_lines])
        ax.scatter(start[:, 0] + 0.03, start[:, 1], marker="x", color=DROPPED, s=18, zorder=3)
    ax.scatter(np.zeros(t), ty, s=10, color="black", zorder=3)
    ax.scatter(np.ones(e), ey, s=28, marker="s", color="black", zorder=3)
    ax.text(0, -1.2, f"{t} tokens", ha="center", fontsize=SMALL_PT)
    ax.text(1, -1.2, f"{e} experts", ha="center", fontsize=SMALL_PT)
    ax.set_xlim(-0.3, 1.3)
    ax.set_ylim(span + 0.5, -2.0)
    ax.axis("off")
    ax.set_title(title or (f"top-{k} routing, capacity C = {r.capacity} per expert and group: "
                           f"{len(dropped_lines)} of {t * k} choices dropped (dashed, ×)"),
                 fontsize=SMALL_PT, loc="left")
    return fig


def _bars(left: np.ndarray, bottom: np.ndarray, top: np.ndarray) -> np.ndarray:
    """Rectangles of width 0.8 from ``bottom`` to ``top``, as vertices [n, 4, 2]."""
    x = np.stack([left, left + 0.8, left + 0.8, left], axis=1)
    y = np.stack([bottom, bottom, top, top], axis=1)
    return np.stack([x, y], axis=2)


def load(r: Routing, devices: Devices, title: str = "", ax: Axes | None = None) -> Figure:
    """Choices routed to each expert (bars), the part its slots take (coloured by the device
    that holds the expert) and the part dropped (pale, outlined in vermilion), against the
    capacity: C slots per group, ``groups · C`` per expert in all (dashed line); dotted: the
    average load."""
    e = r.probs.shape[1]
    routed, kept = r.load(), r.kept()
    if ax is None:
        fig = column_figure(2.4, 6.4)
        ax = fig.subplots()
        fig.subplots_adjust(left=0.1, right=0.98, top=0.86, bottom=0.18)
    left = np.arange(e) - 0.4  # one collection per kind of bar: fast to build and draw
    colours = [c for c in palette(devices) for _ in range(e // devices)]  # by holder
    ax.add_collection(PolyCollection(_bars(left, 0 * kept, kept), facecolors=colours))
    ax.add_collection(PolyCollection(_bars(left, kept, routed), facecolors=DROPPED_FILL,
                                     edgecolors=DROPPED, linewidths=0.8))
    slots = r.groups * r.capacity
    ax.axhline(slots, color="black", linestyle="--", linewidth=1)
    ax.text(e - 0.5, slots, f" capacity {r.groups} × {r.capacity}", va="bottom", ha="right",
            fontsize=SMALL_PT)
    ax.axhline(r.experts.size / e, color="#999999", linestyle=":", linewidth=1)
    ax.set_xlim(-0.6, e - 0.4)
    ax.set_ylim(0, max(routed.max(), slots) * 1.18)
    ax.set_xlabel("expert (colour: the device that holds it)", fontsize=SMALL_PT)
    ax.set_ylabel("token-choices", fontsize=SMALL_PT)
    ax.tick_params(labelsize=SMALL_PT)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(title or f"load per expert: {r.dropped:.1%} of the choices dropped (pale); "
                          "dotted: the average load", fontsize=SMALL_PT, loc="left")
    return ax.figure
