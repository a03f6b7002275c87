"""Figures of what torch did: the recorded op timeline of the ``split_size`` pipeline, the timed
sweep over ``split_size``, and torch's op order next to tpviz's. No torch needed: they take
plain results (:mod:`tpviz.pytorch.split`, :class:`tpviz.pytorch.plan.Comparison`)."""

from __future__ import annotations

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from tpviz.core.figures import SMALL_PT, figure, palette, text_colour
from tpviz.pipeline.bubbles import bubble_formula
from tpviz.pipeline.draw import IDLE
from tpviz.pytorch.plan import Comparison, bubble


def gantt(spans: list[list[tuple]], title: str | None = None) -> Figure:
    """Ranks x time: each op drawn from its recorded start to its recorded end (in ms from the
    first start). Colour = chunk; F full, B lighter; grey = the rank computes nothing."""
    t0 = min(s[2] for rank in spans for s in rank)
    end = max(s[3] for rank in spans for s in rank)
    chunks = max(s[1] for rank in spans for s in rank) + 1
    colours = palette(chunks)
    fig = figure(0.45 * len(spans) + 1.3)
    ax = fig.subplots()
    fig.subplots_adjust(left=0.09, right=0.99, top=0.74, bottom=0.3)
    boxes, faces = [], []
    for r, rank in enumerate(spans):
        for kind, chunk, start, stop in rank:
            a, b = 1000 * (start - t0), 1000 * (stop - t0)
            boxes.append(((a, r - 0.4), (b, r - 0.4), (b, r + 0.4), (a, r + 0.4)))
            faces.append(shade(colours[chunk], kind))
            if b - a >= 0.035 * 1000 * (end - t0):
                ax.text((a + b) / 2, r, f"{kind}{chunk}", ha="center", va="center",
                        fontsize=SMALL_PT, color=text_colour(faces[-1]))
    ax.add_collection(PolyCollection(boxes, facecolors=faces, edgecolors="white",
                                     linewidths=0.4))
    ax.set_facecolor(IDLE)
    ax.set_xlim(0, 1000 * (end - t0))
    ax.set_ylim(len(spans) - 0.5, -0.5)
    ax.set_yticks(range(len(spans)), [f"rank {r}" for r in range(len(spans))])
    ax.set_xlabel("milliseconds since the first op started (recorded starts and ends)",
                  fontsize=SMALL_PT)
    ax.tick_params(labelsize=SMALL_PT)
    ax.set_title(title or f"split_size pipeline on {len(spans)} gloo processes, "
                 f"{chunks} chunks: outside compute {bubble(spans):.0%} of the time (grey)."
                 "\nColour = chunk; F full, B lighter", fontsize=SMALL_PT, loc="left")
    return fig


def sweep(rows: dict, batch: int, title: str | None = None) -> Figure:
    """The timed sweep (:func:`tpviz.pytorch.split.summary`): per ``split_size``, the step's
    wall time against one process's, the CPU time of both processes, and the share of time
    outside compute against GPipe's bubble; dots = the median, bars = min to max."""
    sizes = sorted((k for k in rows if k != "one process"), reverse=True)
    x = np.arange(len(sizes))
    fig = figure(3.0)
    axes = fig.subplots(1, 3)
    fig.subplots_adjust(left=0.08, right=0.99, top=0.76, bottom=0.17, wspace=0.45)
    one = 1000 * rows["one process"]["wall"]
    panels = (("wall", 1000, "step time (ms)"), ("cpu", 1000, "CPU time, both (ms)"),
              ("bubble", 100, "outside compute (%)"))
    for ax, (key, scale, label) in zip(axes, panels, strict=True):
        values = [scale * np.asarray(rows[k][key]) for k in sizes]
        mid = [np.median(v) for v in values]
        ax.errorbar(x, mid, yerr=[np.subtract(mid, [v.min() for v in values]),
                                  np.subtract([v.max() for v in values], mid)],
                    fmt="o", color="#0072B2", capsize=3, markersize=4)
        ax.set_title(label, fontsize=SMALL_PT)
        ax.set_xticks(x, [str(k) for k in sizes])
        ax.set_xlabel("split_size", fontsize=SMALL_PT)
        ax.tick_params(labelsize=SMALL_PT)
    for ax in axes[:2]:  # a log scale: the steps span tens to hundreds of ms
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    axes[0].axhspan(one.min(), one.max(), color="#E69F00", alpha=0.3, lw=0)
    axes[0].axhline(np.median(one), color="#E69F00", lw=1.5, label="one process")
    axes[0].legend(fontsize=SMALL_PT, frameon=False, loc="upper left")
    axes[1].set_ylim(bottom=min(axes[1].get_ylim()[0], axes[0].get_ylim()[0]))
    formula = [100 * bubble_formula("gpipe", 2, batch // k)[0] for k in sizes]
    axes[2].plot(x, formula, "s", color="#D55E00", markersize=4, label="GPipe: 1/(m+1)")
    axes[2].set_ylim(0, 119)
    axes[2].legend(fontsize=SMALL_PT, frameon=False, loc="upper left", handletextpad=0.1)
    fig.suptitle(title or f"One training step, batch {batch}, in m = {batch} / split_size "
                 f"chunks: median (dot) and min–max (bar)\nof {len(one)} repetitions; one "
                 "process alone in orange", fontsize=SMALL_PT, x=0.01, ha="left")
    return fig


def comparison(c: Comparison, title: str | None = None) -> Figure:
    """Each rank's ops in order: torch's row above tpviz's; a red frame where they differ.
    Colour = microbatch; F full, B lighter, W darker; the rank's second chunk thinner;
    short orders (at most 24 ops a row) labelled with kind and microbatch."""
    ranks = len(c.torch_ops)
    width = max(len(o) for o in (*c.torch_ops, *c.tpviz_ops))
    fig = figure(0.62 * ranks + 1.1)
    ax = fig.subplots()
    colours = palette(max(op[1] for o in c.torch_ops + c.tpviz_ops for op in o) + 1)
    faces_of = {k: np.array([shade(x, k) for x in colours]) for k in ("F", "B", "W")}
    boxes, faces, framed = [], [], []
    first_chunk = [min((op[2] for op in ops), default=0) for ops in c.torch_ops]
    for r in range(ranks):
        for row, ops in ((0, c.torch_ops[r]), (1, c.tpviz_ops[r])):
            if not ops:
                continue
            y = r * 2.6 + row * 1.1
            other = (c.tpviz_ops if row == 0 else c.torch_ops)[r]
            kinds, mbs, chunks = (np.array(v) for v in zip(*ops, strict=True))
            at = np.arange(len(ops), dtype=float)
            inset = np.where(chunks != first_chunk[r], 0.2, 0.0)  # the second chunk: thinner
            box = np.empty((len(ops), 4, 2))
            box[:, [0, 3], 0], box[:, [1, 2], 0] = at[:, None], at[:, None] + 0.92
            box[:, :2, 1], box[:, 2:, 1] = (y + inset)[:, None], (y + 0.9 - inset)[:, None]
            face = np.empty((len(ops), 3))
            for kind, table in faces_of.items():
                face[kinds == kind] = table[mbs[kinds == kind]]
            boxes.append(box)
            faces.append(face)
            differs = np.array([i >= len(other) or tuple(other[i]) != tuple(op)
                                for i, op in enumerate(ops)])
            framed.append(box[differs])
            if width <= 24:
                for i, (kind, mb, _) in enumerate(ops):
                    ax.text(i + 0.46, y + 0.45, f"{kind}{mb}", ha="center", va="center",
                            fontsize=SMALL_PT, color=text_colour(face[i]))
    # arrays of boxes in one collection and the red frames in another: a patch per box and
    # hatching made a redraw of 8 ranks x 32 microbatches take a second
    ax.add_collection(PolyCollection(np.concatenate(boxes), facecolors=np.concatenate(faces),
                                     edgecolors="none"))
    ax.add_collection(PolyCollection(np.concatenate(framed), facecolors="none",
                                     edgecolors="red", linewidths=1.6 if width <= 48 else 0.7))
    ax.set_xlim(0, width)
    ax.set_ylim(ranks * 2.6 - 0.5, -0.2)
    ax.set_yticks([r * 2.6 + k * 1.1 + 0.45 for r in range(ranks) for k in (0, 1)],
                  [f"rank {r} {w}" for r in range(ranks) for w in ("torch", "tpviz")],
                  fontsize=SMALL_PT)
    ax.tick_params(labelsize=SMALL_PT)
    ax.set_xlabel("position in the rank's order (thinner: the rank's second chunk)",
                  fontsize=SMALL_PT)
    ax.set_title(title or f"{c.torch_name} against tpviz's {c.tpviz_name!r}: "
                 f"{'identical' if c.equal else 'red frames differ'}", fontsize=SMALL_PT,
                 loc="left")
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.17, right=0.99, top=1 - 0.55 / height, bottom=0.5 / height)
    return fig


def shade(colour, kind: str):
    from matplotlib.colors import to_rgb
    r, g, b = to_rgb(colour)
    if kind == "B":
        return (r + (1 - r) * 0.55, g + (1 - g) * 0.55, b + (1 - b) * 0.55)
    if kind == "W":
        return (r * 0.6, g * 0.6, b * 0.6)
    return (r, g, b)
