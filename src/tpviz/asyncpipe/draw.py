"""Drawings of chapter 8: the Gantt chart coloured by weight version, staleness and weight
copies per stage, and the loss curves of the staleness runs."""

from __future__ import annotations

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from tpviz.asyncpipe.stale import Curve
from tpviz.core.figures import SMALL_PT, TITLE_PT, palette, text_colour
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import Axes, Numbers, OneOf, Size
from tpviz.pipeline.draw import IDLE, time_axes
from tpviz.pipeline.simulate import Timeline

SHADE = {"F": 0.0, "B": 0.55, "BW": 0.55, "W": -0.4}  # B lighter, W darker than F


def version_colours(versions: Size(4096, "more colours cannot be told apart")) -> np.ndarray:
    """One base colour per weight version (a cycle of 10)."""
    return np.array([to_rgb(c) for c in palette(min(max(versions, 1), 10))])


def op_colour(base: Numbers, kind: OneOf(SHADE)) -> np.ndarray:
    """The colour(s) ``base`` of a version, shaded for the op's kind."""
    k, base = SHADE[kind], np.asarray(base, float)
    return base + (1 - base) * k if k >= 0 else base * (1 + k)


def gantt_versions(t: Timeline, ax: Axes | None = None, labels: bool | None = None) -> Figure:
    """Devices × time, one box per op, coloured by the weight version it reads (synchronous
    schedules: one colour, version 0); F full colour, B lighter, W darker; grey = idle. Charts
    of more than 1,500 ops are painted as an image (fast)."""
    s = t.schedule
    if ax is None:
        height = 0.45 * s.stages + 1.6 if s.stages <= 8 else 0.25 * s.stages + 1.6
        fig = column_figure(height)
        ax = fig.subplots()
        fig.subplots_adjust(left=0.08, right=0.97, top=1 - 0.6 / height, bottom=0.55 / height)
    top = max((max(r) for r in t.versions if r), default=0)
    base = version_colours(top + 1)
    shades = {k: op_colour(base, k) for k in SHADE}  # kind -> [version, rgb]
    count = sum(map(len, s.ops))
    labels = count <= 200 if labels is None else labels
    rows = []
    for d in range(s.stages):
        kinds = np.array([op[0] for op in s.ops[d]])
        a = np.asarray(t.starts[d])
        b = a + np.array([t.durations[k] for k in kinds])
        v = np.asarray(t.versions[d]) % len(base)
        colour = np.empty((len(a), 3))
        for kind, table in shades.items():
            colour[kinds == kind] = table[v[kinds == kind]]
        rows.append((a, b, colour))
    if count > 1500:  # one column per pixel of the axes (no resampling), at least 400
        box = ax.get_position()
        width = max(400, min(1600, int(ax.figure.get_figwidth() * ax.figure.dpi * box.width)))
        image = np.empty((5 * s.stages, width, 3))
        image[:] = to_rgb(IDLE)
        scale, columns = width / t.makespan, np.arange(width)
        for d, (a, b, colour) in enumerate(rows):  # each column: the op that covers it
            x0 = (a * scale + 0.5).astype(int)
            x1 = np.maximum(x0 + 1, (b * scale + 0.5).astype(int))
            op = np.searchsorted(x0, columns, side="right") - 1
            covered = (op >= 0) & (columns < x1[np.maximum(op, 0)])
            image[5 * d: 5 * d + 4, covered] = colour[op[covered]]
        ax.imshow(image, extent=(0, t.makespan, s.stages - 0.5, -0.5), aspect="auto",
                  interpolation="nearest")
    else:
        verts = []
        for d, (a, b, _) in enumerate(rows):
            box = np.empty((len(a), 4, 2))
            box[:, [0, 3], 0], box[:, [1, 2], 0] = a[:, None], b[:, None]
            box[:, :2, 1], box[:, 2:, 1] = d - 0.4, d + 0.4
            verts.append(box)
        ax.add_collection(PolyCollection(np.concatenate(verts),
                                         facecolors=np.concatenate([r[2] for r in rows]),
                                         edgecolors="white", linewidths=0.5))
    if labels:
        for d, ((a, b, colour), ops) in enumerate(zip(rows, s.ops, strict=True)):
            for op, x0, x1, c in zip(ops, a, b, colour, strict=True):
                if x1 - x0 >= 0.04 * t.makespan:
                    ax.text((x0 + x1) / 2, d, f"{op.kind}{op.microbatch}", ha="center",
                            va="center", fontsize=SMALL_PT, color=text_colour(c))
    time_axes(ax, t)
    ax.set_title(f"{s.name}: p = {s.stages}, m = {s.microbatches}; colour = weight version "
                 f"read (0 … {top}).\nF full, B lighter, W darker; grey = idle",
                 fontsize=SMALL_PT, loc="left")
    return ax.figure


def losses(curves: dict[str, Curve], ax: Axes | None = None, title: str = "",
           legend: bool = True) -> Figure:
    """Loss of the current weights after every step, one colour per run (log scale): the
    median over the seeds as a line, the band from the lowest to the highest seed shaded."""
    if ax is None:
        fig = column_figure(3.6, layout="constrained")
        ax = fig.subplots()
    colours = palette(len(curves))
    for (label, c), colour in zip(curves.items(), colours, strict=True):
        steps = np.arange(c.losses.shape[1])
        if len(c.seeds) > 1:
            ax.fill_between(steps, c.losses.min(axis=0), c.losses.max(axis=0), color=colour,
                            alpha=0.2, linewidth=0)
        ax.plot(steps, np.median(c.losses, axis=0), color=colour, label=label, linewidth=1.3)
    ax.set_yscale("log")
    ax.set_xlabel("step (one microbatch)", fontsize=SMALL_PT)
    ax.set_ylabel("loss on a fixed batch", fontsize=SMALL_PT)
    ax.tick_params(labelsize=SMALL_PT)
    if legend:
        ax.legend(fontsize=SMALL_PT, loc="upper right")
    ax.set_title(title, fontsize=TITLE_PT, loc="left")
    return ax.figure


def curves_panels(panels: dict[str, dict[str, Curve]], title: str = "") -> Figure:
    """Runs of one learning rate in panels side by side, ``{panel title: {label: Curve}}``,
    each panel with its own legend below it (median over seeds, min-max band): at most 8 runs a
    panel keeps every colour distinct."""
    fig = column_figure(5.4, layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True))
    seeds = len(next(iter(next(iter(panels.values())).values())).seeds)
    for ax, (name, curves) in zip(axes, panels.items(), strict=True):
        losses(curves, ax, name, legend=False)
        ax.legend(fontsize=SMALL_PT, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                  frameon=False)
    fig.suptitle(title or f"median of {seeds} seeds; shaded: lowest to highest seed",
                 fontsize=SMALL_PT)
    return fig


def curves_side_by_side(results: dict[float, dict[str, Curve]], title: str = "") -> Figure:
    """One panel per learning rate of :func:`tpviz.asyncpipe.stale.train`'s result, side by
    side (median over seeds, min-max band), and one legend below them."""
    fig = column_figure(4.6, layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(results), sharey=True))
    seeds = len(next(iter(next(iter(results.values())).values())).seeds)
    for ax, (lr, curves) in zip(axes, results.items(), strict=True):
        losses(curves, ax, f"learning rate {lr}", legend=False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=SMALL_PT)
    fig.suptitle(title or f"median of {seeds} seeds; shaded: lowest to highest seed",
                 fontsize=SMALL_PT)
    return fig
