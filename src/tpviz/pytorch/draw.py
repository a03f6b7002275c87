"""Figures of what torch did, on tpviz's charts: the measured op timeline of the ``split_size``
pipeline on :func:`tpviz.pipeline.draw.gantt`, and torch's op order next to tpviz's.
No torch needed: both take plain results."""

from __future__ import annotations

import statistics

from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from tpviz.core.figures import SMALL_PT, figure, palette, text_colour
from tpviz.pipeline import draw as pipeline_draw
from tpviz.pipeline.plan import Op, Schedule
from tpviz.pipeline.simulate import Timeline
from tpviz.pytorch.plan import Comparison


def measured_timeline(spans: list[list[tuple]]) -> Timeline:
    """A :class:`~tpviz.pipeline.simulate.Timeline` from measured ``(kind, microbatch, start,
    end)`` per rank. Time is in units of the median forward; each op is drawn at its measured
    start with its kind's median length (the chart draws one length per kind). The bubble is
    measured: 1 - busy time / (ranks × makespan), from the real starts and ends."""
    t0 = min(s[2] for rank in spans for s in rank)
    forward = statistics.median(s[3] - s[2] for rank in spans for s in rank if s[0] == "F")
    ops = tuple(tuple(Op(k, mb, r) for k, mb, *_ in rank) for r, rank in enumerate(spans))
    starts = tuple(tuple((s[2] - t0) / forward for s in rank) for rank in spans)
    durations = {k: statistics.median(s[3] - s[2] for rank in spans for s in rank
                                      if s[0] == k) / forward for k in ("F", "B")}
    durations["W"] = 0.0
    end = max(s[3] for rank in spans for s in rank)
    makespan = (end - t0) / forward
    busy = sum(s[3] - s[2] for rank in spans for s in rank) / forward
    m = max(s[1] for rank in spans for s in rank) + 1
    sched = Schedule("split_size (measured)", len(spans), m, 1, ops)
    return Timeline(sched, starts, durations, makespan, 1 - busy / (len(spans) * makespan),
                    tuple(m for _ in spans))


def gantt(spans: list[list[tuple]], title: str | None = None) -> Figure:
    """The measured timeline on tpviz's Gantt chart."""
    t = measured_timeline(spans)
    return pipeline_draw.gantt(t, title=title or (
        f"split_size pipeline on {len(spans)} gloo processes, measured: bubble "
        f"{t.bubble_fraction:.0%} (grey).  Colour = chunk; F full, B lighter"))


def comparison(c: Comparison, title: str | None = None) -> Figure:
    """Each rank's ops in order: torch's row above tpviz's; a red frame where they differ.
    Colour = microbatch; F full, B lighter, W darker; a rank's second chunk hatched; short
    orders (at most 24 ops a row) labelled with kind and microbatch."""
    ranks = len(c.torch_ops)
    width = max(len(o) for o in (*c.torch_ops, *c.tpviz_ops))
    fig = figure(0.62 * ranks + 1.1)
    ax = fig.subplots()
    colours = palette(max(op[1] for o in c.torch_ops + c.tpviz_ops for op in o) + 1)
    boxes, faces, edges, hatched = [], [], [], []
    first_chunk = [min(op[2] for op in ops) for ops in c.torch_ops]
    for r in range(ranks):
        for row, ops in ((0, c.torch_ops[r]), (1, c.tpviz_ops[r])):
            y = r * 2.6 + row * 1.1
            other = (c.tpviz_ops if row == 0 else c.torch_ops)[r]
            for i, (kind, mb, chunk) in enumerate(ops):
                face = _shade(colours[mb], kind)
                differs = i >= len(other) or tuple(other[i]) != (kind, mb, chunk)
                boxes.append([(i, y), (i + 0.92, y), (i + 0.92, y + 0.9), (i, y + 0.9)])
                faces.append(face)
                edges.append("red" if differs else "white")
                if chunk != first_chunk[r]:
                    hatched.append(boxes[-1])
                if width <= 24:
                    ax.text(i + 0.46, y + 0.45, f"{kind}{mb}", ha="center", va="center",
                            fontsize=SMALL_PT, color=text_colour(face))
    ax.add_collection(PolyCollection(boxes, facecolors=faces, edgecolors=edges,
                                     linewidths=[1.6 if e == "red" else 0.4 for e in edges]))
    ax.add_collection(PolyCollection(hatched, facecolors="none", edgecolors="none",
                                     hatch="////"))
    ax.set_xlim(0, width)
    ax.set_ylim(ranks * 2.6 - 0.5, -0.2)
    ax.set_yticks([r * 2.6 + k * 1.1 + 0.45 for r in range(ranks) for k in (0, 1)],
                  [f"rank {r} {w}" for r in range(ranks) for w in ("torch", "tpviz")],
                  fontsize=SMALL_PT)
    ax.tick_params(labelsize=SMALL_PT)
    ax.set_xlabel("position in the rank's order (hatched: the rank's second chunk)",
                  fontsize=SMALL_PT)
    ax.set_title(title or f"{c.torch_name} against tpviz's {c.tpviz_name!r}: "
                 f"{'identical' if c.equal else 'red frames differ'}", fontsize=SMALL_PT,
                 loc="left")
    fig.subplots_adjust(left=0.2, right=0.99, top=0.9, bottom=0.16)
    return fig


def _shade(colour, kind: str):
    from matplotlib.colors import to_rgb
    r, g, b = to_rgb(colour)
    if kind == "B":
        return (r + (1 - r) * 0.55, g + (1 - g) * 0.55, b + (1 - b) * 0.55)
    if kind == "W":
        return (r * 0.6, g * 0.6, b * 0.6)
    return (r, g, b)
