"""Drawings of a simulated pipeline: a Gantt chart, activations held over time, an animation.

Colour = microbatch; F full colour, B lighter, W darker; idle time (the bubble) is the grey
background.
"""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from tpviz.core.figures import SMALL_PT, TITLE_PT, Animation, frame, gif, palette, text_colour
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import DRAWN, Axes, Index, Size
from tpviz.pipeline.simulate import Timeline, releasing_kind

IDLE = "#e6e6e6"
LABEL_UP_TO, RASTER_ABOVE = 400, 1500


def gantt(t: Timeline, ax: Axes | None = None, title: str | None = None,
          labels: bool | None = None) -> Figure:
    """Devices (rows, device 0 on top) × time; one box per op. Colour = microbatch; F full
    colour, B lighter, W darker; boxes wide enough are labelled (``F3`` = forward of
    microbatch 3); ``labels=None`` labels charts of at most 400 ops. Charts of more than 1,500
    ops are drawn as an image (fast; no gaps between boxes)."""
    s = t.schedule
    if ax is None:
        height = (0.45 if s.stages <= 8 else 0.25) * s.stages + 1.3
        fig = column_figure(height, 10)
        ax = fig.subplots()
        # right: the last time tick's label is centred on the axes' end and must fit the image
        fig.subplots_adjust(left=0.07, right=0.97, top=1 - 0.45 / height, bottom=0.55 / height)
    base = np.array([to_rgb(c) for c in palette(s.microbatches)])
    shades = {"F": base, "B": base + (1 - base) * 0.55, "W": base * 0.6}
    shades["BW"] = shades["B"]
    count = sum(len(o) for o in s.ops)
    if count > RASTER_ABOVE:
        _raster(ax, t, shades)
    else:
        _boxes(ax, t, shades, labels=count <= LABEL_UP_TO if labels is None else labels)
    time_axes(ax, t)
    chunks = f", {s.chunks} chunks per device" if s.chunks > 1 else ""
    ax.set_title(title or f"{s.name}: {s.stages} stages, {s.microbatches} microbatches{chunks} — "
                 f"bubble {t.bubble_fraction:.1%} (grey).\nColour = microbatch; F full, B "
                 "lighter, W darker", fontsize=SMALL_PT, loc="left")
    return ax.figure


def time_axes(ax: Axes, t: Timeline) -> None:
    """The axes every Gantt chart shares: devices down, time across, idle time grey."""
    stages = t.schedule.stages
    ax.set_facecolor(IDLE)
    ax.set_xlim(0, t.makespan)
    ax.set_ylim(stages - 0.5, -0.5)
    step = max(1, stages // 8)
    ax.set_yticks(range(0, stages, step), [f"D{d}" for d in range(0, stages, step)])
    ax.set_xlabel("time (one forward through a stage = 1)", fontsize=SMALL_PT)
    ax.tick_params(labelsize=SMALL_PT)


def _boxes(ax, t: Timeline, shades: dict, labels: bool) -> None:
    s = t.schedule
    verts, faces = [], []
    wide = 0.03 * t.makespan
    for d in range(s.stages):
        kinds = np.array([op[0] for op in s.ops[d]])
        mbs = np.array([op[1] for op in s.ops[d]])
        a = np.asarray(t.starts[d])
        b = a + np.array([t.durations[k] for k in kinds])
        box = np.empty((len(a), 4, 2))
        box[:, [0, 3], 0], box[:, [1, 2], 0] = a[:, None], b[:, None]
        box[:, :2, 1], box[:, 2:, 1] = d - 0.4, d + 0.4
        verts.append(box)
        colour = np.empty((len(a), 3))
        for kind, table in shades.items():
            colour[kinds == kind] = table[mbs[kinds == kind] % len(table)]
        faces.append(colour)
        if labels:
            for k, mb, x0, x1, c in zip(kinds, mbs, a, b, colour, strict=True):
                if x1 - x0 >= wide:
                    ax.text((x0 + x1) / 2, d, f"{k}{mb}", ha="center", va="center",
                            fontsize=SMALL_PT,
                            color=text_colour(c))
    ax.add_collection(PolyCollection(np.concatenate(verts), facecolors=np.concatenate(faces),
                                     edgecolors="white", linewidths=0.5))


def _raster(ax, t: Timeline, shades: dict, width: int = 1600) -> None:
    """Paint the ops into an image: 4 pixel rows per device and one blank row between devices."""
    s = t.schedule
    image = np.empty((5 * s.stages, width, 3))
    image[:] = to_rgb(IDLE)
    scale = width / t.makespan
    for d in range(s.stages):
        row = image[5 * d: 5 * d + 4]
        for (kind, mb, _), start in zip(s.ops[d], t.starts[d], strict=True):
            a = int(start * scale + 0.5)
            row[:, a:max(a + 1, int((start + t.durations[kind]) * scale + 0.5))] = (
                shades[kind][mb % len(shades[kind])])
    ax.imshow(image, extent=(0, t.makespan, s.stages - 0.5, -0.5), aspect="auto",
              interpolation="nearest")


def held_over_time(t: Timeline, device: Index) -> tuple[np.ndarray, np.ndarray]:
    """(times, microbatches held) as a step function: +1 when an F starts, -1 when the op that
    releases the activations (B, or W when split) ends."""
    release = releasing_kind(t.schedule.has_weight_ops)
    events = sorted([(a, 1) for op, a, _ in t.spans(device) if op.kind == "F"]
                    + [(b, -1) for op, _, b in t.spans(device) if op.kind == release])
    times = np.array([0.0] + [e[0] for e in events] + [t.makespan])
    counts = np.cumsum([e[1] for e in events], dtype=int)
    held = np.concatenate([[0], counts, counts[-1:] if len(counts) else [0]])  # until the end
    return times, held


def memory(t: Timeline, ax: Axes | None = None) -> Figure:
    """Microbatch activations each device holds over time (in units of one microbatch through one
    chunk)."""
    if ax is None:
        fig = column_figure(2.8, layout="constrained")
        ax = fig.subplots()
    colours = palette(t.schedule.stages)
    for d in range(t.schedule.stages):
        times, held = held_over_time(t, d)
        ax.step(times, held, where="post", color=colours[d], label=f"D{d}", linewidth=1.5)
    ax.set_xlim(0, t.makespan)
    ax.set_xlabel("time")
    ax.set_ylabel("activations held\n(microbatches)")
    if t.schedule.stages <= 8:  # beside the plot, never over a device's line
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=SMALL_PT, frameon=False,
                  handlelength=1.2)
    peak = list(t.peak_activations)
    held = (f"peak per device {peak}" if len(peak) <= 8 else
            f"peak {peak[0]} on D0 … {peak[-1]} on D{len(peak) - 1}")
    ax.set_title(f"{t.schedule.name}: {held}", fontsize=TITLE_PT, loc="left")
    return ax.figure


def animate(t: Timeline, frames: Size(240, DRAWN) = 24,
            ms_per_frame: Size(60_000, "a minute a frame") = 250) -> Animation:
    """The Gantt chart revealed over time: a cursor sweeps left to right, hiding the future."""
    fig = gantt(t)
    canvas = FigureCanvasAgg(fig)
    ax = fig.axes[0]
    curtain = ax.axvspan(0, t.makespan, color="white", zorder=5)
    cursor = ax.axvline(0, color="black", linewidth=1.5, zorder=6)
    images = []
    for now in np.linspace(0, t.makespan, frames):
        curtain.set_x(now)
        cursor.set_xdata([now, now])
        images.append(frame(canvas))
    images += [images[-1]] * 6  # rest on the finished chart
    return gif(images, f"Animated Gantt chart of the {t.schedule.name} schedule", ms_per_frame)
