"""Figures of collective plans: the primitives, the steps of an algorithm, costs, bucketing.

Everything is drawn from a plan (replayed with :func:`tpviz.collectives.replay.replay`) or a
bucketing timeline; nothing here recomputes the algorithms.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from tpviz.collectives.buckets import Timeline
from tpviz.collectives.plan import ALGORITHMS, CollectivePlan, crossover, line
from tpviz.collectives.replay import replay
from tpviz.core.figures import SMALL_PT, TITLE_PT, palette, text_colour
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import Axes

# What each of 4 devices holds before and after each primitive: a list of cells per device,
# each cell (label, colour index: the device the data came from, or -1 for a sum).
_K = 4


def _primitive(name: str) -> tuple[list, list]:
    own = [[(f"x{d}", d)] for d in range(_K)]
    rows = [[(f"x{d}{j}", d) for j in range(_K)] for d in range(_K)]
    empty = [[] for _ in range(_K)]
    total = [("Σx", -1)]
    if name == "send / recv":
        return [[("x0", 0)], [], [], []], [[("x0", 0)], [("x0", 0)], [], []]
    if name == "broadcast":
        return [[("x0", 0)], [], [], []], [[("x0", 0)] for _ in range(_K)]
    if name == "scatter":
        return [rows[0], [], [], []], [[(f"x0{d}", 0)] for d in range(_K)]
    if name == "gather":
        return own, [[c for r in own for c in r], *empty[1:]]
    if name == "reduce":
        return own, [total, *empty[1:]]
    if name == "all-gather":
        return own, [[c for r in own for c in r] for _ in range(_K)]
    if name == "reduce-scatter":
        return rows, [[(f"Σx·{d}", -1)] for d in range(_K)]
    if name == "all-reduce":
        return own, [total for _ in range(_K)]
    if name == "all-to-all":
        return rows, [[(f"x{s}{d}", s) for s in range(_K)] for d in range(_K)]
    raise KeyError(name)


# one colour per algorithm (Okabe-Ito, without the pale yellow)
COLOURS = dict(zip(ALGORITHMS, ("#999999", "#56B4E9", "#009E73", "#D55E00", "#0072B2"),
                   strict=True))
PRIMITIVES = ("send / recv", "scatter", "gather", "broadcast", "reduce", "all-gather",
              "reduce-scatter", "all-reduce", "all-to-all")


def primitives_figure() -> Figure:
    """Before and after of each primitive on 4 devices (rows D0-D3). ``xd`` is device d's
    array, ``xdj`` its j-th piece, ``Σx`` the sum over devices, ``Σx·j`` the j-th piece of it."""
    colours = palette(_K)
    fig = column_figure(7.6, 10.5)
    axes = fig.subplots(3, 3).ravel()
    fig.subplots_adjust(left=0.03, right=0.99, top=0.95, bottom=0.02, wspace=0.12, hspace=0.3)
    for ax, name in zip(axes, PRIMITIVES, strict=True):
        before, after = _primitive(name)
        for x0, state in ((0, before), (5.5, after)):
            for d, row in enumerate(state):
                ax.text(x0 - 0.15, d + 0.5, f"D{d}", ha="right", va="center", fontsize=SMALL_PT)
                ax.add_patch(Rectangle((x0, d + 0.1), 4, 0.8, fill=False, edgecolor="#bbb"))
                for j, (label, owner) in enumerate(row):
                    c = "#555555" if owner < 0 else colours[owner]
                    ax.add_patch(Rectangle((x0 + j, d + 0.1), 1, 0.8, facecolor=c,
                                           edgecolor="white"))
                    ax.text(x0 + j + 0.5, d + 0.5, label, ha="center", va="center",
                            fontsize=SMALL_PT,
                            color=text_colour(c))
        ax.annotate("", (5.3, 2), (4.2, 2), arrowprops={"arrowstyle": "->"})
        ax.set_xlim(-0.8, 9.6)
        ax.set_ylim(_K, 0)
        ax.set_axis_off()
        ax.set_title(name, fontsize=TITLE_PT)
    return fig


def _contributions(p: CollectivePlan, upto: int) -> np.ndarray:
    """[N, N]: how many devices' data each (device, chunk) holds after ``upto`` steps (0 where
    it holds nothing), found by replaying the plan on one-hot bit patterns."""
    k = p.devices
    bits = np.repeat((2.0 ** np.arange(k))[:, None], k, axis=1)  # device d's data: 2^d
    state = replay(p, bits, upto=upto)[:k]
    held = np.nan_to_num(state, nan=0).astype(np.int64)
    return np.vectorize(lambda v: bin(v).count("1"))(held)


def steps_figure(p: CollectivePlan, per_row: int = 8, ax: Axes | None = None,
                 labels: bool = True) -> Figure:
    """One panel per step (and the start): rows are devices, columns chunks; the shade is how
    many devices' data the chunk holds (dark: none, yellow: all N), and a dot marks the chunks
    that arrived in that step. ``labels=False`` leaves out the step numbers (faster)."""
    k, n = p.devices, len(p.moves) + 1
    per_row = min(per_row, n)
    rows = math.ceil(n / per_row)
    h = k + 2  # a panel's height, with a gap for its label
    grid = np.full((rows * h, per_row * (k + 1)), np.nan)
    dots_x, dots_y = [], []
    for s in range(n):
        r, c = divmod(s, per_row)
        grid[r * h + 2:r * h + 2 + k, c * (k + 1):c * (k + 1) + k] = _contributions(p, s) / k
        for m in p.moves[s - 1] if s else ():
            for chunk in m.chunks:
                dots_x.append(c * (k + 1) + chunk)
                dots_y.append(r * h + 2 + m.dst)
    if ax is None:
        fig = column_figure(0.5 + 0.16 * grid.shape[0], 1.2 + 0.16 * grid.shape[1])
        ax = fig.add_axes((0.02, 0.02, 0.96, 0.86))
    ax.pcolormesh(np.ma.masked_invalid(grid), cmap="cividis", vmin=0, vmax=1)  # cheap to draw
    ax.scatter(np.add(dots_x, 0.5), np.add(dots_y, 0.5), s=6 if k > 8 else 12, c="white",
               edgecolors="black", linewidths=0.4)
    for s in range(n) if labels else ():
        r, c = divmod(s, per_row)
        label = "start" if s == 0 else f"step {s}" if k <= 8 else str(s)
        ax.text(c * (k + 1) + k / 2, r * h + 1.8, label, ha="center", va="bottom",
                fontsize=SMALL_PT)
    ax.set_xlim(0, grid.shape[1])
    ax.set_ylim(grid.shape[0], 0)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.set_title(f"{p.algorithm} {p.op}, N = {k}: rows devices, columns chunks"
                 + ("" if labels else f";\n{n - 1} steps, left to right"), fontsize=SMALL_PT,
                 pad=4)
    return ax.figure


def cost_figure(devices: int, alpha: float, beta: float, nbytes: float | None = None,
                ax: Axes | None = None) -> Figure:
    """Time of each all-reduce algorithm against message size (log-log), with the crossovers
    of the tree and the ring marked; ``nbytes`` draws a vertical line."""
    if ax is None:
        fig = column_figure(3.6, 6)
        ax = fig.add_axes((0.14, 0.15, 0.53, 0.75))
    sizes = np.logspace(2, 11, 60)
    for algorithm, colour in COLOURS.items():
        if algorithm == "halving-doubling" and devices & (devices - 1):
            continue
        steps, slope = line(algorithm, "all-reduce", devices)
        ax.loglog(sizes, steps * alpha + slope * sizes / beta, color=colour, label=algorithm)
    v = crossover("tree", "ring", devices, alpha, beta)
    if v:
        ax.axvline(v, color="#999", linestyle=":", linewidth=1)
        ax.text(v, ax.get_ylim()[1], " tree = ring", fontsize=SMALL_PT, va="top", color="#555")
    if nbytes:
        ax.axvline(nbytes, color="black", linewidth=0.8)
    ax.minorticks_off()  # plain tick labels: mathtext ones are slow to draw
    ax.set_xticks([1e3, 1e6, 1e9], ["1 KB", "1 MB", "1 GB"])
    low, high = ax.get_ylim()
    ticks = [10.0 ** e for e in range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)]
    ax.set_yticks(ticks, [_seconds(t) for t in ticks])
    ax.set_xlabel("message size V", fontsize=SMALL_PT)
    ax.set_ylabel("all-reduce time", fontsize=SMALL_PT)
    ax.tick_params(labelsize=SMALL_PT)
    ax.legend(fontsize=SMALL_PT, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return ax.figure


def _seconds(t: float) -> str:
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if t >= scale:
            return f"{t / scale:g} {unit}"
    return f"{t:g} s"


def timeline_figure(line: Timeline, ax: Axes | None = None) -> Figure:
    """The backward pass (one bar per gradient) above the bucketed all-reduces; the exposed
    communication is shaded."""
    if ax is None:
        fig = column_figure(2.2, 7)
        ax = fig.add_axes((0.12, 0.25, 0.85, 0.6))
    colours = palette(max(1, len(line.buckets)))
    start = 0.0
    for i, end in enumerate(line.grad_ready):
        ax.barh(1, end - start, left=start, color="#bbbbbb" if i % 2 else "#999999", height=0.6)
        start = end
    for b, colour in zip(line.buckets, colours, strict=True):
        ax.barh(0, b.end - b.start, left=b.start, color=colour, height=0.6, edgecolor="white")
    if line.exposed > 0:
        ax.axvspan(line.backward_end, line.end, color="#D55E00", alpha=0.15)
    ax.set_yticks([0, 1], ["all-reduce", "backward"])
    ax.set_xlabel("seconds")
    ax.set_title(f"{len(line.buckets)} bucket(s): exposed communication "
                 f"{line.exposed * 1e3:.2f} ms", fontsize=SMALL_PT)
    return ax.figure


def timelines_figure(lines: dict[str, Timeline]) -> Figure:
    """Several bucketing timelines, one above the other, on the same time axis."""
    fig = column_figure(1.5 + 1.25 * len(lines), 7)
    axes = fig.subplots(len(lines), 1, sharex=True)
    fig.subplots_adjust(left=0.14, right=0.98, top=0.93, bottom=0.1, hspace=0.9)
    for ax, (label, timeline) in zip(np.atleast_1d(axes), lines.items(), strict=True):
        timeline_figure(timeline, ax=ax)
        ax.set_title(f"{label}: {ax.get_title()}", fontsize=SMALL_PT)
        ax.set_xlabel("")
    np.atleast_1d(axes)[-1].set_xlabel("seconds")
    return fig
