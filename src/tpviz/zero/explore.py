"""``explore_zero``: model size, devices, stage, precision → memory per device and the traffic."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core.widgets import Controls, Live, live
from tpviz.zero.draw import memory_bars
from tpviz.zero.plan import MODELS, PRECISIONS, memory, smallest_devices


def render_zero(model: str, billions: float, devices: int, stage: int, precision: str,
                accelerator_gb: float) -> Figure:
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
    fig.axes[0].set_title(fig.axes[0].get_title(loc="left") + f"\nstage {stage}: "
                          f"{total / 1e9:,.1f} GB per device → {verdict}", fontsize=9, loc="left")
    return fig


def explore_zero(model: str = "7.5B (ZeRO paper)", billions: float = 7.5, devices: int = 64,
                 stage: int = 2, precision: str = next(iter(PRECISIONS)),
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
    return live(controls, render_zero)


# settings the benchmarks time: the defaults and a large custom model
BENCHMARKS = [(render_zero, dict(model="7.5B (ZeRO paper)", billions=7.5, devices=64, stage=2,
                                 precision=next(iter(PRECISIONS)), accelerator_gb=80)),
              (render_zero, dict(model="custom", billions=70.0, devices=1024, stage=3,
                                 precision="fp32 Adam (4 + 4 + 8)", accelerator_gb=141))]
