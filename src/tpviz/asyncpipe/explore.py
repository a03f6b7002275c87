"""``explore_zoo``: schedule × stages × microbatches → the Gantt chart coloured by weight
version, with the bubble, staleness, weight copies and peak activations per stage."""

from __future__ import annotations

import textwrap

from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from tpviz.asyncpipe.draw import gantt_versions, op_colour, version_colours
from tpviz.core.figures import SMALL_PT, text_colour
from tpviz.core.live import Grid, LiveFigure
from tpviz.core.validate import flag
from tpviz.core.widgets import Controls, Live, live
from tpviz.pipeline.explore import gantt_chart
from tpviz.pipeline.plan import ZOO, schedule
from tpviz.pipeline.simulate import simulate

NAMES = ("1f1b", "zb-h1", *ZOO)


def _timeline(name: str, stages: int, microbatches: int, split: bool):
    times = (1.0, 1.0, 1.0) if flag("split", split) else (1.0, 2.0)
    return simulate(schedule(name, stages, microbatches), *times)


def summary(t) -> str:
    """The figures the explorer states in words, per stage."""
    return (f"{t.schedule.name}: bubble {t.bubble_fraction:.1%} · staleness per stage "
            f"{list(t.staleness)} updates\nweight copies "
            f"{[float(c) for c in t.weight_copies]} (× a p-th of the model) · peak "
            f"activations {list(t.peak_activations)}")


def render_zoo(name: str = "pipedream", stages: int = 4, microbatches: int = 8,
               split: bool = True) -> Figure:
    """The figure ``explore_zoo`` shows. ``split``: t_F = t_B = t_W = 1 (B and W apart), else
    t_F = 1 and a whole backward of 2."""
    t = _timeline(name, stages, microbatches, split)
    fig = gantt_versions(t, labels=sum(map(len, t.schedule.ops)) <= 64)
    # the words wrapped to the image (16 stages' lists ran off its right edge)
    lines = [w for line in summary(t).split("\n") for w in textwrap.wrap(line, 96)]
    height = fig.get_figheight() + 0.16 * len(lines) + 0.18
    fig.set_figheight(height)
    fig.subplots_adjust(bottom=(0.73 + 0.16 * len(lines)) / height, top=1 - 0.6 / height)
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=SMALL_PT, va="bottom")
    return fig


def explore_zoo(name: str = "pipedream", stages: int = 4, microbatches: int = 8,
                split: bool = True) -> Live:
    """Schedule, stages and microbatches → the Gantt chart by weight version and its figures."""
    c = Controls("explore_zoo")
    controls = {
        "name": c.dropdown("name", name, NAMES, "schedule"),
        "stages": c.int_slider("stages", stages, 2, 16, "stages p"),
        "microbatches": c.int_slider("microbatches", microbatches, 2, 64, "microbatches m"),
        "split": c.checkbox("split", split, "t_W apart (t_F = t_B = t_W)"),
    }
    return live(controls, render_zoo, figure=LIVE)


def zoo_rows(name: str, stages: int, microbatches: int, split: bool) -> list[dict]:
    """The live figure's rows: one per op (device, start, end, colour by weight version) and
    a note with the figures per stage."""
    t = _timeline(name, stages, microbatches, split)
    top = max((max(r) for r in t.versions if r), default=0)
    base = version_colours(top + 1)
    rows = []
    for d in range(stages):
        for (op, a, b), v in zip(t.spans(d), t.versions[d], strict=True):
            colour = op_colour(base[v % len(base)], op.kind)
            rows.append({"device": f"D{d}", "start": a, "end": b,
                         "label": f"{op.kind}{op.microbatch}", "colour": to_hex(colour),
                         "ink": text_colour(colour), "span": t.makespan})
    rows.append({"note": summary(t)})
    return rows


LIVE = LiveFigure(
    controls={"name": Grid(NAMES, "schedule", start="pipedream"),
              "stages": Grid([2, 4, 8], "stages p", start=4),
              "microbatches": Grid([8, 16], "microbatches m", start=8)},
    # t_W apart or not draws the same chart for these settings (a dead control): fixed here
    fixed={"split": True},
    rows=zoo_rows, chart=gantt_chart)

# the defaults and the largest setting the widget offers
BENCHMARKS = [(render_zoo, dict(name="pipedream", stages=4, microbatches=8, split=True)),
              (render_zoo, dict(name="dualpipev", stages=16, microbatches=64, split=True)),
              (render_zoo, dict(name="chimera", stages=16, microbatches=64, split=False))]
