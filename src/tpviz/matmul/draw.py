"""The figure of a sharded matmul plan: who holds and computes which block, and what moves."""

from __future__ import annotations

import textwrap

from matplotlib.figure import Figure

from tpviz.core import cost, layout
from tpviz.core.figures import SMALL_PT, blocks_figure
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import SystemLike
from tpviz.core.notation import to_notation
from tpviz.matmul.plan import MatmulPlan


def _wrap(line: str, width: int = 95) -> str:
    """A line of the caption broken to the figure's width at 9 pt."""
    return textwrap.fill(line, width, subsequent_indent="  ", break_on_hyphens=False)


def figure(p: MatmulPlan, *, system: SystemLike | None = None) -> Figure:
    """``In · W1 = Out`` side by side for a :class:`tpviz.matmul.MatmulPlan`: who holds which block
    of each operand, who computes which block of Out, and (below) what moves between devices."""
    system = None if system is None else cost.system(system)
    fig = column_figure(4.4)  # a fixed layout: constrained layout would double the time
    axes = fig.subplots(1, 3, width_ratios=[p.x_shape[1], p.w_shape[1], p.w_shape[1]],
                        gridspec_kw={"left": 0.06, "right": 0.96, "top": 0.7, "bottom": 0.08,
                                     "wspace": 0.3})
    arrays = [("In", ("B", "D"), p.x_shape, p.x_spec), ("W1", ("D", "F"), p.w_shape, p.w_spec),
              ("Out", ("B", "F"), (p.x_shape[0], p.w_shape[1]), p.y_spec)]
    for ax, (name, dims, shape, spec) in zip(axes, arrays, strict=True):
        bs = layout.blocks(shape, spec, p.mesh_shape)
        blocks_figure(shape, [(b.slices, b.devices) for b in bs],
                      to_notation(spec, name=name, dims=dims), ax=ax)
    moves = [f"{c.kind} of {c.what} over {'×'.join(c.axes)} ({c.group_size} devices): "
             f"{c.bytes:,} bytes per device" for c in p.collectives] or ["no communication"]
    lines = [p.describe(), *moves, f"{p.flops:,} FLOPs per device"]
    if system is not None:
        e = cost.estimate(p.flops, p.collectives, system)
        lines.append(f"{system.name}: compute {e.compute_s * 1e6:.2f} µs, communication "
                     f"{e.comm_s * 1e6:.2f} µs → {e.bound}-bound")
    fig.suptitle("\n".join(_wrap(line) for line in lines), fontsize=SMALL_PT, x=0.01, y=0.99,
                 ha="left", va="top")
    return fig
