"""``explore_zero``: model size, devices, stage, precision → memory per device and the traffic."""

from __future__ import annotations

import textwrap

from matplotlib.figure import Figure

from tpviz.core.kinds import Devices, Index, OneOf, Positive
from tpviz.core.live import Grid, LiveFigure, notes
from tpviz.core.widgets import Controls, Live, live
from tpviz.zero.draw import memory_bars
from tpviz.zero.plan import MODELS, PRECISIONS, STAGES, memory, smallest_devices


def render_zero(model: str, billions: Positive, devices: Devices, stage: OneOf(STAGES),
                precision: OneOf(PRECISIONS), accelerator_gb: Positive) -> Figure:
    """The figure ``explore_zero`` shows: memory bars of all stages, the chosen one outlined."""
    params = MODELS[model] if model in MODELS else billions * 1e9
    p, g, o = PRECISIONS[precision]
    fig = memory_bars(params, devices, capacity=accelerator_gb * 1e9, stage=stage,
                      param_bytes=p, grad_bytes=g, optimizer_bytes=o)
    total = memory(params, devices, stage, param_bytes=p, grad_bytes=g, optimizer_bytes=o).total
    fewest = smallest_devices(params, stage, accelerator_gb * 1e9, param_bytes=p, grad_bytes=g,
                              optimizer_bytes=o)
    verdict = ("fits" if total <= accelerator_gb * 1e9 else "does not fit") + (
        f"; stage {stage} needs at least {fewest} devices" if fewest else
        f"; stage {stage} never fits: part of the state stays whole on every device")
    said = f"stage {stage}: {total / 1e9:,.1f} GB per device → {verdict}"
    lines = [fig.axes[0].get_title(loc="left"), *textwrap.wrap(said, 90)]  # inside the image
    fig.axes[0].set_title("\n".join(lines), fontsize=9, loc="left")
    fig.subplots_adjust(top=1 - (0.2 + 0.16 * len(lines)) / fig.get_figheight())
    return fig


def explore_zero(model: str = "7.5B (ZeRO paper)", billions: float = 7.5, devices: int = 64,
                 stage: Index = 2, precision: str = next(iter(PRECISIONS)),
                 accelerator_gb: float = 80) -> Live:
    """Model size, devices, stage and precision → memory per device by category against an
    accelerator's memory, the communication per step, and whether it fits."""
    c = Controls("explore_zero")
    controls = {
        "model": c.dropdown("model", model, [*MODELS, "custom"], "model"),
        "billions": c.number_box("billions", billions, 0.001, 10000, "custom size (billions)"),
        "devices": c.dropdown("devices", devices, [2**k for k in range(11)], "devices N"),
        "stage": c.int_slider("stage", stage, 0, 3, "ZeRO stage"),
        "precision": c.dropdown("precision", precision, PRECISIONS, "precision"),
        "accelerator_gb": c.dropdown("accelerator_gb", accelerator_gb, [16, 24, 40, 80, 96, 141],
                                     "accelerator GB"),
    }
    return live(controls, render_zero, figure=LIVE)


def zero_rows(model: str, devices: int, precision: str, accelerator_gb: float) -> list[dict]:
    """The live figure's rows: GB per device of each category at every stage (from
    :func:`tpviz.zero.plan.memory`), the accelerator's memory, and the verdict in words."""
    params, (p, g, o) = MODELS[model], PRECISIONS[precision]
    sizes = dict(param_bytes=p, grad_bytes=g, optimizer_bytes=o)
    rows = [{"stage": f"stage {s}", "s": s, "category": c,
             "GB": round(getattr(memory(params, devices, s, **sizes), c) / 1e9, 4)}
            for s in (0, 1, 2, 3) for c in ("params", "grads", "optimizer")]
    for stage in (0, 1, 2, 3):  # the words for each stage; the stage control picks one
        total = memory(params, devices, stage, **sizes).total
        fewest = smallest_devices(params, stage, accelerator_gb * 1e9, **sizes)
        rows.append({"s": stage, "note": (
            f"stage {stage}: {total / 1e9:,.1f} GB per device on {devices} devices → "
            f"{'fits' if total <= accelerator_gb * 1e9 else 'does not fit'} in "
            f"{accelerator_gb:g} GB; " + (f"needs at least {fewest} devices" if fewest
                                          else "never fits: part stays whole"))})
    rows.append({"capacity": accelerator_gb})
    return rows


def zero_chart(base):
    """Stacked bars of memory per device by category, one per stage; the chosen stage dark."""
    import altair as alt

    mem = base.transform_filter("isValid(datum.category)")
    y = alt.Y("stage:N", title=None)
    stack = mem.mark_bar().encode(
        x=alt.X("GB:Q", title="GB per device"), y=y,
        color=alt.Color("category:N", sort=["params", "grads", "optimizer"],
                        scale=alt.Scale(range=["#0072B2", "#E69F00", "#009E73"])),
        opacity=alt.condition("datum.s == stage", alt.value(1.0), alt.value(0.45)),
        order=alt.Order("category:N", sort="descending"))
    line = base.transform_filter("isValid(datum.capacity)").mark_rule(
        color="black", strokeDash=[4, 3]).encode(x="capacity:Q")
    chosen = notes(base.transform_filter("datum.s == stage"))
    return alt.vconcat(chosen, alt.layer(stack, line).properties(
        width=560, height={"step": 26}))


LIVE = LiveFigure(
    controls={"model": Grid(list(MODELS), "model", start="7.5B (ZeRO paper)"),
              "devices": Grid([1, 4, 16, 64, 256, 1024], "devices N", start=64),
              "stage": Grid([0, 1, 2, 3], "ZeRO stage", start=2, in_rows=False),
              "precision": Grid(list(PRECISIONS), "precision"),
              "accelerator_gb": Grid([24, 40, 80, 141], "accelerator GB", start=80)},
    rows=zero_rows, chart=zero_chart)


# settings the benchmarks time: the defaults and a large custom model
BENCHMARKS = [(render_zero, dict(model="7.5B (ZeRO paper)", billions=7.5, devices=64, stage=2,
                                 precision=next(iter(PRECISIONS)), accelerator_gb=80)),
              (render_zero, dict(model="custom", billions=70.0, devices=1024, stage=3,
                                 precision="fp32 Adam (4 + 4 + 8)", accelerator_gb=141))]
