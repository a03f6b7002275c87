"""Drawings of a solved graph: each op a box coloured by its strategy; stages of a pipeline."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from tpviz.autoshard.solve import Solution
from tpviz.autoshard.stages import Stages
from tpviz.autoshard.strategies import Strategy
from tpviz.core.figures import OKABE_ITO, SMALL_PT, text_colour
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import DRAWN, Inches, Size
from tpviz.core.notation import axes_of

COLOURS = {"data parallel": OKABE_ITO[1], "column-parallel": OKABE_ITO[0],
           "row-parallel": OKABE_ITO[2], "columns split": OKABE_ITO[3], "2D": OKABE_ITO[6],
           "replicated": "#cccccc", "other": OKABE_ITO[5]}


def label(s: Strategy) -> str:
    """The family a strategy belongs to: "data parallel", "column-parallel", "row-parallel",
    "columns split" (element-wise), "2D" (batch and a model dimension), "replicated"."""
    if s.weight_spec is not None:  # matmul: which of B, D, F carry mesh axes
        b, d = (axes_of(e) for e in s.in_specs[0])
        f = axes_of(s.weight_spec[1])
        split = [k for k, v in (("B", b), ("D", d), ("F", f)) if v]
        return {(): "replicated", ("B",): "data parallel", ("F",): "column-parallel",
                ("D",): "row-parallel", ("B", "F"): "2D", ("B", "D"): "2D"}.get(
                    tuple(split), "other")
    spec = s.in_specs[0] if s.in_specs else s.out_spec
    rows, cols = (axes_of(e) for e in ([*list(spec), None, None])[:2])
    return ("2D" if rows and cols else "data parallel" if rows else
            "columns split" if cols else "replicated")


def graph(solution: Solution, per_row: Size(64, DRAWN) = 8, title: str = "", notation: bool = True,
          width: Inches = 10) -> Figure:
    """The graph left to right (wrapping after ``per_row`` ops), each op coloured by its chosen
    strategy, with its notation below it (``notation=False`` leaves it out: smaller, faster)."""
    ops = solution.problem.graph.ops
    rows = -(-len(ops) // per_row)
    fig = column_figure(0.5 + (1.05 if notation else 0.6) * rows, width)
    ax = fig.add_axes((0.01, 0.02, 0.98, 1 - 0.45 / fig.get_figheight()))
    at = {op.name: (i % per_row, i // per_row) for i, op in enumerate(ops)}
    seen = []
    for op in ops:
        x, y = at[op.name]
        s = solution.choice[op.name]
        kind = label(s)
        seen.append(kind)
        colour = COLOURS[kind]
        ax.add_patch(plt.Rectangle((x + 0.08, y + 0.1), 0.84, 0.42, facecolor=colour,
                                   edgecolor="black", linewidth=0.5))
        ax.text(x + 0.5, y + 0.31, op.name, ha="center", va="center", fontsize=SMALL_PT,
                color=text_colour(colour))
        if notation:
            text = s.notation.replace(" · ", "·\n") if s.weight_spec is not None else s.notation
            ax.text(x + 0.5, y + 0.58, text, ha="center", va="top", fontsize=SMALL_PT)
        for src in op.inputs:
            if src in at and at[src][1] == y and at[src][0] == x - 1:
                ax.annotate("", (x + 0.08, y + 0.31), (x - 0.08, y + 0.31),
                            arrowprops={"arrowstyle": "->", "lw": 0.8})
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=COLOURS[k]) for k in dict.fromkeys(seen)]
    ax.legend(handles, list(dict.fromkeys(seen)), loc="lower left", bbox_to_anchor=(0, 1),
              ncol=len(handles), fontsize=SMALL_PT, frameon=False, borderaxespad=0.1)
    ax.set_xlim(0, per_row)
    ax.set_ylim(rows if notation else rows - 0.4, 0)
    ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=SMALL_PT, x=0.99, ha="right", y=0.995)
    return fig


def stages(plan: Stages, title: str = "") -> Figure:
    """Each stage as a bar: its layers, its submesh and its time per microbatch."""
    height = 1.0 + 0.4 * len(plan.times)
    fig = column_figure(height, 8)
    ax = fig.add_axes((0.24, 0.5 / height, 0.73, 1 - 0.8 / height))
    for i, ((a, b), s, t) in enumerate(zip(plan.bounds, plan.submeshes, plan.times,
                                           strict=True)):
        colour = OKABE_ITO[4] if t == max(plan.times) else OKABE_ITO[1]
        ax.barh(i, t, color=colour)
        where = f"layer {a}" if b - a == 1 else f"layers {a}–{b - 1}"
        ax.text(-0.01 * max(plan.times), i, f"{where}, submesh "
                f"{'×'.join(map(str, s))}", ha="right", va="center", fontsize=SMALL_PT)
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_xlabel("seconds per microbatch (darkest: the slowest stage sets the pace)",
            fontsize=SMALL_PT)
    ax.set_title(title or r"$T = \sum_s t_s + (m - 1)\,\max_s t_s$" + f" = {plan.latency:.3g} s "
                 f"with $m$ = {plan.microbatches} microbatches", fontsize=SMALL_PT, loc="left")
    return fig
