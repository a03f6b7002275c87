"""``explore_pipeline``: schedule, stages, microbatches → the Gantt chart, bubble and memory."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core.widgets import Controls, Live, live
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
    if name == "zb-h1":  # Qi et al.'s (p−1)·t_F idle time holds for t_F = t_B = t_W only
        expected_text = f"{expected:.2%} (assumes t_F = t_B = t_W)"
    else:
        expected_text = f"{expected:.2%}"
    height = fig.get_figheight() + 0.3  # room for one more line below the chart
    fig.set_figheight(height)
    fig.subplots_adjust(bottom=0.85 / height, top=1 - 0.45 / height)
    fig.text(0.07, 0.01, f"bubble: simulated {t.bubble_fraction:.2%}, formula {formula} = "
             f"{expected_text}   ·   peak activations held (microbatches × chunks): first device "
             f"{peak[0]}, last {peak[-1]}", fontsize=9, va="bottom")
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
    return live(controls, render_pipeline)


# settings the benchmarks time: the defaults and the largest the widget offers (p <= 16, m <= 64)
BENCHMARKS = [(render_pipeline, dict(name="1f1b", stages=4, microbatches=8, chunks=2,
                                     backward_ratio=2.0)),
              (render_pipeline, dict(name="interleaved", stages=16, microbatches=64, chunks=4,
                                     backward_ratio=2.0)),
              (render_pipeline, dict(name="zb-h1", stages=16, microbatches=64, chunks=1,
                                     backward_ratio=2.0))]
