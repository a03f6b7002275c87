"""``explore_pipeline``: schedule, stages, microbatches → the Gantt chart, bubble and memory."""

from __future__ import annotations

import ipywidgets as widgets
from matplotlib.figure import Figure

from tpviz.core.widgets import STYLE, Live, live
from tpviz.pipeline.draw import gantt
from tpviz.pipeline.plan import NAMES, schedule
from tpviz.pipeline.simulate import bubble_formula, simulate


def render_pipeline(name: str, stages: int, microbatches: int, chunks: int,
                    backward_ratio: float) -> Figure:
    """The figure ``explore_pipeline`` shows: the Gantt chart, and simulated vs formula."""
    v = chunks if name == "interleaved" else 1
    t = simulate(schedule(name, stages, microbatches, v), 1.0, backward_ratio)
    fig = gantt(t, labels=sum(map(len, t.schedule.ops)) <= 64)  # text is slow
    expected, formula = bubble_formula(name, stages, microbatches, v, 1.0,
                                                backward_ratio)
    peak = t.peak_activations
    height = fig.get_figheight() + 0.3  # room for one more line below the chart
    fig.set_figheight(height)
    fig.subplots_adjust(bottom=0.85 / height, top=1 - 0.45 / height)
    fig.text(0.07, 0.01, f"bubble: simulated {t.bubble_fraction:.2%}, formula {formula} = "
             f"{expected:.2%}   ·   peak activations held (microbatches × chunks): first device "
             f"{peak[0]}, last {peak[-1]}", fontsize=9, va="bottom")
    return fig


def explore_pipeline(name: str = "1f1b", stages: int = 4, microbatches: int = 8,
                     chunks: int = 2, backward_ratio: float = 2.0) -> Live:
    """Schedule, stages, microbatches, chunks (interleaved only) and the backward/forward time
    ratio → the Gantt chart, the bubble (simulated and by formula) and the peak memory."""
    controls = {
        "name": widgets.Dropdown(options=list(NAMES), value=name,
                                 description="schedule", style=STYLE),
        "stages": widgets.IntSlider(value=stages, min=1, max=16, description="stages p",
                                    style=STYLE),
        "microbatches": widgets.IntSlider(value=microbatches, min=1, max=64,
                                          description="microbatches m", style=STYLE),
        "chunks": widgets.IntSlider(value=chunks, min=1, max=4,
                                    description="chunks v (interleaved)", style=STYLE),
        "backward_ratio": widgets.FloatSlider(value=backward_ratio, min=0.5, max=4.0, step=0.5,
                                              description="backward / forward", style=STYLE),
    }
    return live(controls, render_pipeline)


# settings the benchmarks time: the defaults and the largest the widget offers (p <= 16, m <= 64)
BENCHMARKS = [(render_pipeline, dict(name="1f1b", stages=4, microbatches=8, chunks=2,
                                     backward_ratio=2.0)),
              (render_pipeline, dict(name="interleaved", stages=16, microbatches=64, chunks=4,
                                     backward_ratio=2.0)),
              (render_pipeline, dict(name="zb-h1", stages=16, microbatches=64, chunks=1,
                                     backward_ratio=2.0))]
