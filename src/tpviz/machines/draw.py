"""Figures of chapter 2, drawn from :mod:`tpviz.core.hardware` (nothing is recomputed here)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tpviz.core import hardware as hw
from tpviz.core.figures import OKABE_ITO, SMALL_PT, figure
from tpviz.core.kinds import Callback, OneOf, Sizes
from tpviz.errors import ArgumentError, ArgumentTypeError


def roofline(chip: OneOf(lambda: [*hw.CHIPS, *hw.SYSTEMS]) = "TPU v5e", dtype: str = "bf16",
             batches: Sizes(2**20, "a batch beyond it is off the chart", length=None,
                            least=1) = (16, 64, 240, 1024, 4096),
             d: int = 8192, f: int = 8192) -> Figure:
    """Attainable FLOP/s against arithmetic intensity on ``chip`` (log-log): the HBM slope,
    the compute roof, the ridge, and the matmuls ``X[B, D] · W[D, F]`` of ``batches``."""
    c = hw.chip_of(chip)
    peak, ridge = c.peak(dtype), c.ridge(dtype)
    size = 1 if dtype in ("int8", "fp8") else 2
    x = np.logspace(0, 4, 200)
    fig = figure(3.6)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.15, top=0.9)
    ax = fig.add_subplot()
    lg = np.log10
    ax.plot(lg(x), lg(np.minimum(peak, x * c.hbm_bandwidth)), color=OKABE_ITO[4], lw=2)
    ax.axvline(lg(ridge), color="grey", ls=":", lw=1)
    bottom = int(lg(peak)) - 3
    fixed = [ax.text(lg(ridge) + 0.05, lg(peak) - 1.5, f"ridge {ridge:,.0f} FLOPs/byte",
                     fontsize=SMALL_PT),
             ax.text(lg(ridge) - 0.05, bottom + 0.25, "← memory-bound", ha="right",
                     fontsize=SMALL_PT),
             ax.text(lg(ridge) + 0.05, bottom + 0.25, "compute-bound →", fontsize=SMALL_PT)]
    labels = []
    for i, b in enumerate(sorted(batches)):
        r = hw.roofline(c.name, 2 * b * d * f, size * (b * d + d * f + b * f), dtype)
        point = (lg(r.intensity), lg(r.flops / r.seconds))
        ax.plot(*point, "o", color=OKABE_ITO[(i + 5) % 8])
        labels.append(ax.annotate(f"B={b}", point, fontsize=SMALL_PT,
                                  textcoords="offset points", xytext=_SPOTS[0][0]))
    _powers(ax.xaxis, range(0, 5), "")
    _powers(ax.yaxis, range(int(lg(peak)) - 3, int(lg(peak)) + 2), "")
    ax.set(xlabel="arithmetic intensity (FLOPs per HBM byte)", ylabel="attainable FLOP/s",
           title=f"{c.name} roofline, {dtype} (matmul D = F = {d:,})",
           ylim=(bottom, lg(peak) + 0.5))  # room for labels above the roof
    _place(ax, labels, [*fixed, ax.title])
    return fig


# where a point's label may go (offset in points, horizontal alignment), in order of preference
_SPOTS = tuple(((dx, dy), "left" if dx > 0 else "right") for dy in (-14, 5, -28, 18)
               for dx in (4, -4))


def _place(ax, labels, fixed) -> None:
    """Put each label at the first spot next to its point where it overlaps neither a label
    already placed nor a ``fixed`` text, and stays inside the axes (the roofline's batches
    can be a factor of 2 apart: a few pixels)."""
    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    box = ax.get_window_extent(renderer)
    taken = [t.get_window_extent(renderer) for t in fixed]
    for label in labels:
        for offset, align in _SPOTS:
            label.xyann = offset
            label.set_horizontalalignment(align)
            b = label.get_window_extent(renderer)
            inside = box.x0 <= b.x0 and b.x1 <= box.x1 and box.y0 <= b.y0 and b.y1 <= box.y1
            if inside and not any(b.overlaps(t) for t in taken):
                break
        taken.append(label.get_window_extent(renderer))


def _powers(axis, exponents, unit: str) -> None:
    """Ticks at powers of ten labelled in plain text (no mathtext: the PNG stays fast)."""
    exponents = list(exponents)
    axis.set_ticks(exponents, [f"1e{e}{unit}" for e in exponents])


def torus(mesh_shape: Sizes(64, "a drawing of more chips per axis is unreadable") = (4, 4),
          wrap: tuple[bool, ...] = (False, False), title: str = "") -> Figure:
    """Chips of a 2D slice with their ICI links; wraparound links drawn as arcs."""
    if not 1 <= len(mesh_shape) <= 2 or len(wrap) != len(mesh_shape):
        raise ArgumentError(f"mesh_shape = {mesh_shape} and wrap = {wrap}: give one or two "
                            f"axes, and one wrap flag per axis.")
    rows, cols = (*tuple(mesh_shape), 1)[:2]
    wraps = (*tuple(wrap), False)[:2]
    fig = figure(0.4 * rows + 1.2, 0.4 * cols + 1.6, layout="constrained")
    ax = fig.add_subplot()
    for r in range(rows):
        for c in range(cols):
            if c + 1 < cols:
                ax.plot([c, c + 1], [r, r], color="grey", lw=1)
            if r + 1 < rows:
                ax.plot([c, c], [r, r + 1], color="grey", lw=1)
    arc = np.linspace(0, np.pi, 30)
    if wraps[1] and cols > 2:  # axis 1: along each row
        for r in range(rows):
            ax.plot((cols - 1) / 2 + (cols - 1) / 2 * np.cos(arc),
                    r + 0.35 * np.sin(arc), color=OKABE_ITO[5], lw=1)
    if wraps[0] and rows > 2:  # axis 0: along each column
        for c in range(cols):
            ax.plot(c + 0.35 * np.sin(arc), (rows - 1) / 2 + (rows - 1) / 2 * np.cos(arc),
                    color=OKABE_ITO[5], lw=1)
    ax.scatter(*np.meshgrid(range(cols), range(rows)), s=60, color=OKABE_ITO[4], zorder=3)
    ax.set(xlim=(-0.7, cols - 0.3 + 0.5), ylim=(rows - 0.3 + 0.5, -0.7), aspect="equal",
           xticks=[], yticks=[], xlabel="axis 1", ylabel="axis 0",
           title=title or f"{rows}×{cols}: wraparound {wraps}")
    return fig


def collective_curve(price: Callback, label: str = "", sizes: Sequence[float] | None = None,
                     marked: float | None = None) -> Figure:
    """Seconds of a collective against V (log-log): the latency term, the bandwidth term and
    their sum, from ``price(nbytes)`` (a :class:`tpviz.core.hardware.Price` maker)."""
    sizes = np.logspace(2, 10, 33) if sizes is None else np.asarray(sizes)
    got = [price(v) for v in sizes]
    if not all(isinstance(g, hw.Price) for g in got):
        raise ArgumentTypeError(f"price must return a tpviz.core.hardware.Price for each size, "
                                f"got {type(got[0]).__name__}; e.g. lambda v: cluster.price("
                                f"'all-reduce', v).")
    fig = figure(3.4)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.16, top=0.9)
    ax = fig.add_subplot()
    lg = np.log10
    x = lg(sizes)
    ax.plot(x, lg([p.seconds for p in got]), color="black", lw=2, label="time")
    ax.plot(x, lg([max(p.latency_s, 1e-12) for p in got]), ls="--", color=OKABE_ITO[5],
            label="latency term")
    ax.plot(x, lg([max(p.bandwidth_s, 1e-12) for p in got]), ls="--", color=OKABE_ITO[4],
            label="bandwidth term")
    if marked is not None:
        p = price(marked)
        ax.plot(lg(marked), lg(p.seconds), "o", color=OKABE_ITO[0], ms=8,
                label=f"{p.bound}-bound")
    lo, hi = lg(min(p.seconds for p in got)), lg(max(p.seconds for p in got))
    _powers(ax.xaxis, range(int(x[0]), int(x[-1]) + 1, 2), " B")
    _powers(ax.yaxis, range(int(np.floor(lo)) - 1, int(np.ceil(hi)) + 1), " s")
    ax.set(xlabel="V, bytes of the whole array", ylabel="seconds", ylim=(lo - 0.5, hi + 0.3),
           title=label)
    ax.legend(fontsize=SMALL_PT, loc="upper left")
    return fig
