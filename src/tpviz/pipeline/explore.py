"""``explore_pipeline``: schedule, stages, microbatches → the Gantt chart, bubble and memory."""

from __future__ import annotations

import math
import textwrap

import numpy as np
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure

from tpviz.core.figures import palette, text_colour
from tpviz.core.kinds import Rate
from tpviz.core.live import FONT, OUTLINE, PLOT_PX, Grid, LiveFigure, notes
from tpviz.core.validate import bounded
from tpviz.core.widgets import Controls, Live, live
from tpviz.errors import ScheduleError
from tpviz.pipeline.bubbles import bubble_formula
from tpviz.pipeline.draw import gantt
from tpviz.pipeline.plan import NAMES, schedule
from tpviz.pipeline.simulate import simulate

DRAWN_OPS = 16_384  # forward ops a redraw draws (with their backwards): a few hundred ms
#: characters of the footer's lines: 9-pt text across the image (6.8 in) without being cut
FOOTER_CHARS = 88


def render_pipeline(name: str, stages: int, microbatches: int, chunks: int,
                    backward_ratio: Rate) -> Figure:
    """The figure ``explore_pipeline`` shows: the Gantt chart, and simulated vs formula."""
    v = chunks if name == "interleaved" else 1
    bounded("stages × microbatches × chunks (bars of the Gantt chart)", stages * microbatches * v,
            DRAWN_OPS, "Draw a smaller pipeline: more bars take seconds to draw.", ScheduleError)
    t = simulate(schedule(name, stages, microbatches, v), 1.0, backward_ratio)
    fig = gantt(t, labels=sum(map(len, t.schedule.ops)) <= 64)  # text is slow
    expected, formula = bubble_formula(name, stages, microbatches, v, 1.0,
                                                backward_ratio)
    peak = t.peak_activations
    if name == "zb-h1":  # Qi et al.'s (p−1)·t_F idle time holds for t_F = t_B = t_W only
        expected_text = f"{expected:.2%} (assumes t_F = t_B = t_W)"
    else:
        expected_text = f"{expected:.2%}"
    lines = (textwrap.wrap(f"bubble: simulated {t.bubble_fraction:.2%}, formula {formula} = "
                           f"{expected_text}", FOOTER_CHARS)
             + textwrap.wrap(f"peak activations held (microbatches × chunks): first device "
                             f"{peak[0]}, last {peak[-1]}", FOOTER_CHARS))
    height = fig.get_figheight() + 0.16 * len(lines)  # room for the lines below the chart
    fig.set_figheight(height)
    fig.subplots_adjust(bottom=(0.55 + 0.16 * len(lines)) / height, top=1 - 0.45 / height)
    fig.text(0.07, 0.01, "\n".join(lines), fontsize=9, va="bottom")
    return fig


def explore_pipeline(name: str = "1f1b", stages: int = 4, microbatches: int = 8,
                     chunks: int = 2, backward_ratio: float = 2.0) -> Live:
    """Schedule, stages, microbatches, chunks (interleaved only) and the backward/forward time
    ratio → the Gantt chart, the bubble (simulated and by formula) and the peak memory."""
    c = Controls("explore_pipeline")
    controls = {
        "name": c.dropdown("name", name, NAMES, "schedule"),
        "stages": c.int_slider("stages", stages, 1, 16, "stages p"),
        "microbatches": c.int_slider("microbatches", microbatches, 1, 64, "microbatches m"),
        "chunks": c.int_slider("chunks", chunks, 1, 4, "chunks v (interleaved)"),
        "backward_ratio": c.float_slider("backward_ratio", backward_ratio, 0.5, 4.0, 0.5,
                                         "backward / forward"),
    }
    return live(controls, render_pipeline, figure=LIVE)


def gantt_rows(name: str, stages: int, microbatches: int, chunks: int,
               backward_ratio: float) -> list[dict]:
    """The live figure's rows for one setting: one per op (device, start, end, colour as in
    :func:`tpviz.pipeline.draw.gantt`) and a note with the bubble, simulated and by formula."""
    v = chunks if name == "interleaved" else 1
    t = simulate(schedule(name, stages, microbatches, v), 1.0, backward_ratio)
    base = np.array([to_rgb(c) for c in palette(microbatches)])
    shades = {"F": base, "B": base + (1 - base) * 0.55, "W": base * 0.6}
    shades["BW"] = shades["B"]
    rows = [{"device": f"D{d}", "start": s, "end": e, "label": f"{op.kind}{op.microbatch}",
             "colour": to_hex(shades[op.kind][op.microbatch]), "span": t.makespan,
             "ink": text_colour(shades[op.kind][op.microbatch])}
            for d in range(stages) for op, s, e in t.spans(d)]
    expected, formula = bubble_formula(name, stages, microbatches, v, 1.0, backward_ratio)
    by_formula = (f"formula {formula} = {expected:.1%}" if math.isfinite(expected) else
                  formula.strip("()"))
    rows.append({"note": f"{name}: bubble {t.bubble_fraction:.1%} (grey), {by_formula}; "
                 f"peak activations: first device {t.peak_activations[0]}, "
                 f"last {t.peak_activations[-1]}"})
    return rows


def gantt_chart(base):
    """The Gantt chart of the live figure: devices × time, one box per op, labelled."""
    import altair as alt

    ops = base.transform_filter("isValid(datum.device)")
    y = alt.Y("device:N", sort=None, title=None)
    boxes = ops.mark_bar(stroke=OUTLINE, strokeWidth=0.5).encode(
        x=alt.X("start:Q", title="time (one forward through a stage = 1)"), x2="end:Q", y=y,
        color=alt.Color("colour:N", scale=None), tooltip=["label:N", "start:Q", "end:Q"])
    # a label only where its box is wide enough at the width the chart is drawn (PLOT_PX)
    # (filtered out, not hidden: fewer text marks to draw on every move)
    text = ops.transform_filter(f"(datum.end - datum.start) / datum.span * {PLOT_PX} >= 22"
                                ).transform_calculate(mid="(datum.start + datum.end) / 2"
                                                      ).mark_text(fontSize=FONT - 1).encode(
        x="mid:Q", y=y, text="label:N", color=alt.Color("ink:N", scale=None))
    chart = alt.layer(boxes, text).properties(width=640, height={"step": 22},
                                              view=alt.ViewBackground(fill="#e6e6e6"))
    return alt.vconcat(notes(base), chart)


# the static book's live figure: small grids of the same controls (settings plan-level)
LIVE = LiveFigure(
    controls={"name": Grid(NAMES, "schedule", start="1f1b"),
              "stages": Grid([2, 4, 8], "stages p", start=4),
              "microbatches": Grid([4, 8, 16], "microbatches m", start=8),
              "chunks": Grid([1, 2], "chunks v (interleaved)", start=2),
              "backward_ratio": Grid([1.0, 2.0], "backward / forward", start=2.0)},
    rows=gantt_rows, chart=gantt_chart)


# settings the benchmarks time: the defaults and the largest the widget offers (p <= 16, m <= 64)
BENCHMARKS = [(render_pipeline, dict(name="1f1b", stages=4, microbatches=8, chunks=2,
                                     backward_ratio=2.0)),
              (render_pipeline, dict(name="interleaved", stages=16, microbatches=64, chunks=4,
                                     backward_ratio=2.0)),
              (render_pipeline, dict(name="zb-h1", stages=16, microbatches=64, chunks=1,
                                     backward_ratio=2.0))]
