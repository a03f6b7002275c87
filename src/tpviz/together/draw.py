"""Drawings of a 3D plan: memory per device stacked by category, and where a step's time goes."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from tpviz.core.figures import OKABE_ITO, SMALL_PT
from tpviz.core.figures import figure as column_figure
from tpviz.together.plan import CATEGORIES, Plan

COLOURS = dict(zip(CATEGORIES, (OKABE_ITO[4], OKABE_ITO[0], OKABE_ITO[2], OKABE_ITO[1],
                                OKABE_ITO[6]), strict=True))
TIME = ("compute", "tensor", "pipeline", "data", "bubble")
TIME_COLOURS = dict(zip(TIME, (OKABE_ITO[2], OKABE_ITO[4], OKABE_ITO[0], OKABE_ITO[1],
                               "#bbbbbb"), strict=True))


def memory_bars(plans: Sequence[Plan], names: Sequence[str] | None = None) -> Figure:
    """Left: one bar per plan, its device's memory stacked by category (GB), the device's
    memory as a dashed line. Right: its step time stacked (compute, exposed communication per
    axis, bubble), with the MFU above."""
    names = list(names or [p.label() for p in plans])
    fig = column_figure(2.6, 7)
    left, right = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.095, right=0.99, top=0.9, bottom=0.1, wspace=0.25)
    x = range(len(plans))
    for ax, parts, colours, unit in ((left, CATEGORIES, COLOURS, 1e9),
                                     (right, TIME, TIME_COLOURS, 1.0)):
        base = [0.0] * len(plans)
        for part in parts:
            values = [_value(p, part, ax is left) / unit for p in plans]
            ax.bar(x, values, bottom=base, color=colours[part], label=part, width=0.6)
            base = [b + v for b, v in zip(base, values, strict=True)]
        ax.set_xticks(list(x), names, fontsize=SMALL_PT)
        # the step time's five parts in two columns: in three they ran off the image
        ax.legend(fontsize=SMALL_PT, loc="upper left", frameon=False,
                  ncol=3 if ax is left else 2, handlelength=1, columnspacing=0.8)
        ax.set_ylim(0, max(base + ([plans[0].cluster.memory / unit] if ax is left else []))
                    * (1.45 if ax is left else 1.7))
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    left.axhline(plans[0].cluster.memory / 1e9, color="black", linestyle="--", linewidth=1)
    left.set_ylabel("GB per device", fontsize=SMALL_PT)
    left.set_title("memory of the first stage", fontsize=SMALL_PT)
    right.set_ylabel("seconds per step", fontsize=SMALL_PT)
    right.set_title("step time", fontsize=SMALL_PT)
    for i, p in enumerate(plans):
        right.text(i, p.step_s * 1.03, f"MFU {p.mfu:.0%}", ha="center", fontsize=SMALL_PT)
    return fig


def _value(plan: Plan, part: str, memory: bool) -> float:
    if memory:
        return plan.memory[part]
    if part == "compute":
        return plan.compute_s
    return plan.bubble_s if part == "bubble" else plan.comm_s[part]
