"""``explore_schedules``: a torch schedule, p ranks and m microbatches → torch's order of
actions on every rank next to tpviz's, op by op, where they differ framed in red.

Torch's orders come from :func:`tpviz.pytorch.orders.torch_order` (the schedule objects'
``pipeline_order``, built without processes), tpviz's from :func:`tpviz.pipeline.schedule`; the
comparison is :func:`tpviz.pytorch.plan.compare`. This module imports without torch; its
functions need it.
"""

from __future__ import annotations

from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure

from tpviz.compat import torch_version
from tpviz.core.figures import palette
from tpviz.core.live import OUTLINE, Grid, LiveFigure, notes
from tpviz.core.widgets import Controls, Live, live
from tpviz.errors import ArgumentError, ScheduleError
from tpviz.pytorch import draw
from tpviz.pytorch.plan import TORCH_SCHEDULES, Comparison, compare

#: what the chapter checked on 4 processes (m = 8): for every schedule but Schedule1F1B the
#: stages ran the declared order op for op; Schedule1F1B runs its own loop
DECLARED = {"Schedule1F1B": "Schedule1F1B runs its own loop (tpviz's 1F1B, in the chapter's "
                            "run); the order shown is its pipeline_order, a description, off by "
                            "one microbatch on the last rank"}


def plan(name: str, ranks: int, microbatches: int) -> Comparison:
    """Torch's declared order of ``name`` at ``ranks`` and ``microbatches`` against tpviz's.

    Raises:
        ArgumentError: torch or tpviz refuses these settings (the message says which, and why).
    """
    from tpviz.pytorch.orders import torch_order

    order = torch_order(name, ranks, microbatches)
    try:
        return compare(name, order, microbatches)
    except ScheduleError as e:
        raise ArgumentError(f"torch's {name} runs p = {ranks}, m = {microbatches}; tpviz's "
                            f"{TORCH_SCHEDULES[name][0]!r} does not: {e}") from None


def render_schedules(name: str, ranks: int, microbatches: int) -> Figure:
    """The figure ``explore_schedules`` shows: :func:`tpviz.pytorch.draw.comparison`."""
    c = plan(name, ranks, microbatches)
    return draw.comparison(c, title=f"{name}, p = {ranks}, m = {microbatches}:\n"
                           f"{_verdict(c)}")


def _verdict(c: Comparison) -> str:
    return (f"identical to tpviz's {c.tpviz_name!r}" if c.equal else
            f"red frames differ from tpviz's {c.tpviz_name!r}")


def explore_schedules(name: str = "ScheduleInterleaved1F1B", ranks: int = 4,
                      microbatches: int = 8) -> Live:
    """Torch's schedule class, ranks p and microbatches m → each rank's order of actions in
    torch (upper row) and in tpviz (lower row), and what differs, in words."""
    ctl = Controls("explore_schedules")
    controls = {
        "name": ctl.dropdown("name", name, list(TORCH_SCHEDULES), "torch schedule"),
        "ranks": ctl.int_slider("ranks", ranks, 2, 8, "ranks p"),
        "microbatches": ctl.int_slider("microbatches", microbatches, 1, 32, "microbatches m"),
    }
    return live(controls, render_schedules, figure=LIVE)


def comparison_rows(name: str, ranks: int, microbatches: int) -> list[dict]:
    """The live figure's rows for one setting: one per op (``y`` = 2 rank + 0 for torch's row,
    + 1 for tpviz's; ``i`` position; ``l`` label, in the tooltip; ``c`` colour; ``d`` 1 where
    the two rows differ; ``k`` 1 on the rank's second chunk) and notes in words."""
    c = plan(name, ranks, microbatches)
    mbs = 1 + max(op[1] for ops in c.torch_ops + c.tpviz_ops for op in ops)
    colours = [to_rgb(x) for x in palette(mbs)]
    rows = [{"note": f"torch's {name} (upper row of each rank) against tpviz's "
                     f"{c.tpviz_name!r} (lower row): {c.explanation}"}]
    if name in DECLARED:
        rows.append({"note": DECLARED[name]})
    first = [min((op[2] for op in ops), default=0) for ops in c.torch_ops]
    faces = {(k, mb): draw.shade(colours[mb], k) for k in "FBW" for mb in range(mbs)}
    ink = {key: to_hex(face) for key, face in faces.items()}
    for w, (mine, other) in enumerate(((c.torch_ops, c.tpviz_ops),
                                       (c.tpviz_ops, c.torch_ops))):
        for r, ops in enumerate(mine):
            for i, (kind, mb, chunk) in enumerate(ops):
                differs = i >= len(other[r]) or tuple(other[r][i]) != (kind, mb, chunk)
                rows.append({"y": 2 * r + w, "i": i, "l": f"{kind}{mb}", "c": ink[kind, mb],
                             "d": int(differs), "k": int(chunk != first[r])})
    return rows


def comparison_chart(base):
    """Two rows per rank (torch above, tpviz below), one bar per op in order; red frame where
    the two differ; the rank's second chunk thinner; each op's name in its tooltip. One mark
    per op (frames and thickness are encodings, not layers) and no text layer: a move takes
    12-16 ms median in Chromium against 17-29 ms with the labels drawn (measured on the built
    page), and the page's budget is 50 ms."""
    import altair as alt

    ops = base.transform_filter("isValid(datum.y)")
    y = alt.Y("y:O", title=None, axis=alt.Axis(labelExpr=(
        "'rank ' + floor(datum.value / 2) + (datum.value % 2 ? ' tpviz' : ' torch')")))
    x = alt.X("i:Q", title="position in the rank's order (thin: the rank's second chunk)",
              scale=alt.Scale(nice=False, zero=True))
    boxes = ops.transform_calculate(x2="datum.i + 0.92").mark_bar().encode(
        x=x, x2="x2:Q", y=y, color=alt.Color("c:N", scale=None),
        size=alt.condition("datum.k", alt.value(8), alt.value(14)),
        stroke=alt.condition("datum.d", alt.value("#d62728"), alt.value(OUTLINE)),
        strokeWidth=alt.condition("datum.d", alt.value(1.5), alt.value(0.5)),
        tooltip=["l:N", "i:Q"])
    # a fixed height (two 16-px rows for each of the page's up to 4 ranks): a move never
    # changes the figure's size, so the page below it is not laid out again
    chart = boxes.properties(width=640, height=16 * 2 * max(LIVE.controls["ranks"].values))
    return alt.vconcat(notes(base), chart)


LIVE = LiveFigure(
    controls={"name": Grid(list(TORCH_SCHEDULES), "torch schedule",
                           start="ScheduleInterleaved1F1B"),
              "ranks": Grid([2, 4], "ranks p", start=4),
              "microbatches": Grid([4, 6, 8], "microbatches m", start=8)},
    rows=comparison_rows, chart=comparison_chart)
# (m = 16 at p = 8 draws 1,536 bars: 40-80 ms a move in Chromium, over the page's 50 ms, and
# m = 12 at p = 8 took 49-67 ms at p90 over two idle runs of the built page, and p = 8 at m = 8
# up to 62 ms in a whole run of the browser test; the notebook's widget offers all of these)


# settings the benchmarks time (torch computes the orders: none where torch is not installed)
BENCHMARKS = [] if torch_version() is None else [
    (render_schedules, dict(name="ScheduleInterleaved1F1B", ranks=4, microbatches=8)),
    (render_schedules, dict(name="ScheduleZBVZeroBubble", ranks=8, microbatches=32)),
    (render_schedules, dict(name="ScheduleDualPipeV", ranks=8, microbatches=32))]
