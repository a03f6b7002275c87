"""Widgets: a few controls that re-plan and redraw.

Each ``explore_*`` returns a :class:`Live` object. In Jupyter or Colab it shows the live controls;
in the static book (where no kernel runs) it shows a figure of the default settings and says that
the controls are live when the notebook runs.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import ipywidgets as widgets
import jax.numpy as jnp
import matplotlib.pyplot as plt
from IPython.display import HTML, Image, display
from matplotlib.figure import Figure

from tpviz import cost, draw, hlo, layout, matmul, megatron, mesh2d, pipeline, zero
from tpviz.devices import make_mesh
from tpviz.errors import TpvizError
from tpviz.mesh2d import draw as mesh2d_draw
from tpviz.pipeline import draw as pipeline_draw
from tpviz.zero import draw as zero_draw

STATIC_NOTE = ("Figure of the default settings. The controls are live when you run this notebook "
               "(Jupyter, Colab or Binder).")


def png(fig: Figure) -> bytes:
    """Render a figure to PNG bytes (and close it if pyplot manages it)."""
    data = draw._png(fig)
    plt.close(fig)
    return data


class Live:
    """A widget plus a static figure of its default state, chosen by the front end.

    The MIME bundle carries both: front ends that run widgets (Jupyter, Colab) show the widget;
    the book is configured to drop the widget view, and shows the figure (after ``html``, a table
    the figure goes with, if any) and a note instead.
    """

    def __init__(self, widget: widgets.Widget, static: bytes, note: str = STATIC_NOTE,
                 html: str = ""):
        self.widget, self.static, self.note, self.html = widget, static, note, html

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.widget._repr_mimebundle_()
        data = base64.b64encode(self.static).decode()
        bundle["text/html"] = (f'{self.html}<figure><img src="data:image/png;base64,{data}" '
                               f'alt="{self.note}"/><figcaption><em>{self.note}</em>'
                               "</figcaption></figure>")
        bundle["text/plain"] = self.note
        return bundle


Rendered = Figure | str | tuple[str, Figure]


def live(controls: dict[str, widgets.ValueWidget], render: Callable[..., Rendered]) -> Live:
    """Wire ``controls`` to ``render(**values)``: a figure, ``(html, figure)`` (a table shown
    above the figure: HTML costs the redraw nothing), or a message for bad settings."""
    out = widgets.Output()

    def show(result: Rendered) -> None:
        if isinstance(result, tuple):
            display(HTML(result[0]))
            result = result[1]
        if isinstance(result, Figure):
            display(result)
            plt.close(result)
        else:
            print(result)

    def redraw(_=None):
        values = {k: w.value for k, w in controls.items()}
        with out:
            out.clear_output(wait=True)
            try:
                result = render(**values)
            except TpvizError as e:  # bad settings: say why, keep the controls alive
                result = f"⚠ {e}"
            show(result)

    for w in controls.values():
        w.observe(redraw, names="value")
    first = render(**{k: w.value for k, w in controls.items()})
    html, fig = first if isinstance(first, tuple) else ("", first)
    static = png(fig)
    with out:
        if html:
            display(HTML(html))
        display(Image(static))
    rows = [list(controls.values())[i:i + 3] for i in range(0, len(controls), 3)]
    box = widgets.VBox([*(widgets.HBox(r) for r in rows), out])
    return Live(box, static, html=html)


MESHES = {"X=8": {"X": 8}, "X=2, Y=4": {"X": 2, "Y": 4}, "X=4, Y=2": {"X": 4, "Y": 2},
          "X=2, Y=2, Z=2": {"X": 2, "Y": 2, "Z": 2}}


def render_layout(mesh: str, notation: str, rows: int, cols: int, dtype: str) -> Figure:
    """The figure ``explore_layout`` shows for one setting (also used by the benchmarks)."""
    parsed = layout.parse(notation)
    return draw.sharding((rows, cols), parsed.spec, MESHES[mesh], name=parsed.name, dtype=dtype)


def explore_layout(mesh: str = "X=2, Y=4", notation: str = "A[I_X, J_Y]", rows: int = 8,
                   cols: int = 16, dtype: str = "float32") -> Live:
    """Mesh shape and sharding notation → the layout drawing and the bytes each device holds."""
    style = {"description_width": "initial"}
    controls = {
        "mesh": widgets.Dropdown(options=list(MESHES), value=mesh, description="mesh", style=style),
        "notation": widgets.Text(value=notation, description="sharding", continuous_update=False,
                                 style=style),
        "dtype": widgets.Dropdown(options=["float32", "bf16", "int8"], value=dtype,
                                  description="dtype", style=style),
        "rows": widgets.IntSlider(value=rows, min=1, max=32, description="rows", style=style),
        "cols": widgets.IntSlider(value=cols, min=1, max=32, description="columns", style=style),
    }
    return live(controls, render_layout)


def render_matmul(mesh: str, x: str, w: str, b: int, d: int, f: int, system: str,
                  reduce_scatter: bool = False, compile: bool = False) -> Figure:
    """The figure ``explore_matmul`` shows; with ``compile``, also the compiled collectives."""
    p = matmul.plan((b, d), (d, f), layout.parse(x).spec, layout.parse(w).spec, MESHES[mesh],
                    dtype="bf16", reduce_scatter=reduce_scatter)
    fig = draw.matmul(p, system=cost.SYSTEMS[system])
    if compile:
        m = make_mesh(tuple(MESHES[mesh].values()), tuple(MESHES[mesh]))
        found = hlo.collectives(matmul.explicit(p, m), jnp.zeros((b, d), jnp.bfloat16),
                                jnp.zeros((d, f), jnp.bfloat16))
        text = "; ".join(f"{c.kind} {c.dtype}{list(c.shape)} ({c.bytes:,} bytes) over "
                         f"{c.group_size} devices" for c in found) or "no collectives"
        fig.text(0.5, 0.01, f"compiled shard_map program: {text}", fontsize=9, ha="center")
    return fig


def explore_matmul(mesh: str = "X=2, Y=4", x: str = "X[B_X, D_Y]", w: str = "W[D_Y, F]",
                   b: int = 1024, d: int = 4096, f: int = 4096,
                   system: str = "TPU v5e (ICI)") -> Live:
    """Shapes, mesh and shardings of X and W → the drawing, what moves, and the cost model."""
    style = {"description_width": "initial"}
    sizes = [256, 512, 1024, 2048, 4096, 8192, 16384]
    controls = {
        "mesh": widgets.Dropdown(options=list(MESHES), value=mesh, description="mesh", style=style),
        "x": widgets.Text(value=x, description="X", continuous_update=False, style=style),
        "w": widgets.Text(value=w, description="W", continuous_update=False, style=style),
        "b": widgets.SelectionSlider(options=sizes, value=b, description="B", style=style),
        "d": widgets.SelectionSlider(options=sizes, value=d, description="D", style=style),
        "f": widgets.SelectionSlider(options=sizes, value=f, description="F", style=style),
        "system": widgets.Dropdown(options=list(cost.SYSTEMS), value=system,
                                   description="system", style=style),
        "reduce_scatter": widgets.Checkbox(value=False, description="reduce-scatter (case 3)"),
        "compile": widgets.Checkbox(value=False, description="compile and list collectives"),
    }
    return live(controls, render_matmul)


def render_pipeline(name: str, stages: int, microbatches: int, chunks: int,
                    backward_ratio: float) -> Figure:
    """The figure ``explore_pipeline`` shows: the Gantt chart, and simulated vs formula."""
    v = chunks if name == "interleaved" else 1
    t = pipeline.simulate(pipeline.schedule(name, stages, microbatches, v), 1.0, backward_ratio)
    fig = pipeline_draw.gantt(t, labels=sum(map(len, t.schedule.ops)) <= 64)  # text is slow
    expected, formula = pipeline.bubble_formula(name, stages, microbatches, v, 1.0,
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
    style = {"description_width": "initial"}
    controls = {
        "name": widgets.Dropdown(options=list(pipeline.NAMES), value=name,
                                 description="schedule", style=style),
        "stages": widgets.IntSlider(value=stages, min=1, max=16, description="stages p",
                                    style=style),
        "microbatches": widgets.IntSlider(value=microbatches, min=1, max=64,
                                          description="microbatches m", style=style),
        "chunks": widgets.IntSlider(value=chunks, min=1, max=4,
                                    description="chunks v (interleaved)", style=style),
        "backward_ratio": widgets.FloatSlider(value=backward_ratio, min=0.5, max=4.0, step=0.5,
                                              description="backward / forward", style=style),
    }
    return live(controls, render_pipeline)


def render_megatron(devices: int, hidden: int, ffn_ratio: int, heads: int, tokens: int,
                    dtype: str) -> Figure:
    """The figure ``explore_megatron`` shows: the sharded MLP and the block's budget."""
    p = megatron.plan(tokens, hidden, ffn_ratio * hidden, heads, devices, dtype)
    mb = 2**20
    return draw.megatron_mlp(p, footer=(
        f"whole block (attention + MLP): weights {p.weight_bytes / mb:,.1f} MiB, "
        f"{p.weight_bytes_per_device / mb:,.1f} MiB per device; {p.heads // devices} of "
        f"{p.heads} heads per device\nper training step: {p.forward_all_reduces} + "
        f"{p.backward_all_reduces} all-reduces of {p.all_reduce_bytes / mb:,.2f} MiB → each "
        f"device sends {p.ring_bytes_per_step / mb:,.2f} MiB (ring)"))


def explore_megatron(devices: int = 4, hidden: int = 1024, ffn_ratio: int = 4, heads: int = 16,
                     tokens: int = 2048, dtype: str = "bf16") -> Live:
    """Devices, hidden size, heads and tokens → per-device shapes, bytes communicated per layer
    and weight memory per device of a Megatron transformer block."""
    style = {"description_width": "initial"}
    controls = {
        "devices": widgets.Dropdown(options=[1, 2, 4, 8, 16], value=devices,
                                    description="devices N", style=style),
        "hidden": widgets.SelectionSlider(options=[256, 512, 1024, 2048, 4096, 8192, 12288],
                                          value=hidden, description="hidden H", style=style),
        "ffn_ratio": widgets.IntSlider(value=ffn_ratio, min=1, max=8, description="F / H",
                                       style=style),
        "heads": widgets.SelectionSlider(options=[4, 8, 12, 16, 32, 64, 96], value=heads,
                                         description="heads", style=style),
        "tokens": widgets.SelectionSlider(options=[256, 512, 1024, 2048, 4096, 8192],
                                          value=tokens, description="tokens (batch × seq)",
                                          style=style),
        "dtype": widgets.Dropdown(options=["bf16", "float32"], value=dtype, description="dtype",
                                  style=style),
    }
    return live(controls, render_megatron)


PRECISIONS = {"mixed bf16 + fp32 Adam (2 + 2 + 12)": (2, 2, 12),
              "fp32 Adam (4 + 4 + 8)": (4, 4, 8), "bf16 Adam states (2 + 2 + 4)": (2, 2, 4)}


def render_zero(model: str, billions: float, devices: int, stage: int, precision: str,
                accelerator_gb: float) -> Figure:
    """The figure ``explore_zero`` shows: memory bars of all stages, the chosen one outlined."""
    params = zero.MODELS[model] if model in zero.MODELS else billions * 1e9
    p, g, o = PRECISIONS[precision]
    fig = zero_draw.memory_bars(params, devices, capacity=accelerator_gb * 1e9, stage=stage,
                                param_bytes=p, grad_bytes=g, optimizer_bytes=o)
    total = zero.memory(params, devices, stage, param_bytes=p, grad_bytes=g,
                        optimizer_bytes=o).total
    fewest = zero.smallest_devices(params, stage, accelerator_gb * 1e9, param_bytes=p,
                                   grad_bytes=g, optimizer_bytes=o)
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
    style = {"description_width": "initial"}
    controls = {
        "model": widgets.Dropdown(options=[*zero.MODELS, "custom"], value=model,
                                  description="model", style=style),
        "billions": widgets.BoundedFloatText(value=billions, min=0.001, max=10000,
                                             description="custom size (billions)", style=style),
        "devices": widgets.Dropdown(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
                                    value=devices, description="devices N", style=style),
        "stage": widgets.IntSlider(value=stage, min=0, max=3, description="ZeRO stage",
                                   style=style),
        "precision": widgets.Dropdown(options=list(PRECISIONS), value=precision,
                                      description="precision", style=style),
        "accelerator_gb": widgets.Dropdown(options=[16, 24, 40, 80, 96, 141], value=accelerator_gb,
                                           description="accelerator GB", style=style),
    }
    return live(controls, render_zero)


def render_mesh2d(devices: int, data: int, batch: int, h1: int, h2_ratio: int, system: str,
                  dtype: str) -> tuple[str, Figure]:
    """What ``explore_mesh2d`` shows: the step table of the chosen mesh (HTML), then a figure of
    memory and bytes per step beside data parallelism, 1D Megatron and the best mesh shape."""
    if devices % data:
        raise TpvizError(f"data = {data} does not divide {devices} devices; the model axis gets "
                         "devices / data of them. Choose a divisor.")
    h2 = h2_ratio * h1
    p = mesh2d.plan(batch, h1, h2, (data, devices // data), dtype)
    sys = cost.SYSTEMS[system]
    t = mesh2d.step_time(p, sys)
    best = mesh2d.best_mesh(batch, h1, h2, devices, sys, dtype)
    schemes = [s for s in mesh2d.compare(batch, h1, h2, devices, dtype)
               if s.name in ("data parallel", "1D Megatron") or s.mesh in (p.shape, best)]
    height = 1.6 + 0.36 * len(schemes)
    fig = Figure(figsize=(10, height))
    left, right = fig.subplots(1, 2, sharey=True)
    fig.subplots_adjust(left=0.14, right=0.98, top=1 - 0.9 / height, bottom=0.45 / height,
                        wspace=0.05)
    mesh2d_draw.comparison(schemes, axes=(left, right), chosen=f"2D {data}×{devices // data}")
    fig.suptitle(f"{system}, data={data} × model={devices // data}: compute "
                 f"{t.compute_s * 1e3:,.2f} ms, communication {t.comm_s * 1e3:,.2f} ms per "
                 f"training step → {t.bound}-bound\nleast communication: data={best[0]} × "
                 f"model={best[1]}; below: data parallel, 1D Megatron, this mesh and the best",
                 fontsize=9, x=0.01, y=0.995, ha="left", va="top")
    return p._repr_html_(), fig


def explore_mesh2d(devices: int = 8, data: int = 4, batch: int = 16384, h1: int = 4096,
                   h2_ratio: int = 4, system: str = "H100 cluster (NVLink + InfiniBand)",
                   dtype: str = "bf16") -> Live:
    """Mesh shape, batch and hidden sizes → the 2D MLP's step table, memory per device, bytes
    per step, and the comparison with data parallelism and 1D tensor parallelism."""
    style = {"description_width": "initial"}
    controls = {
        "devices": widgets.Dropdown(options=[8, 16, 32, 64, 256], value=devices,
                                    description="devices N", style=style),
        "data": widgets.Dropdown(options=[1, 2, 4, 8, 16, 32, 64, 128, 256], value=data,
                                 description="data axis d (model = N / d)", style=style),
        "batch": widgets.SelectionSlider(options=[2**k for k in range(4, 21)], value=batch,
                                         description="batch B (tokens)", style=style),
        "h1": widgets.SelectionSlider(options=[256, 512, 1024, 2048, 4096, 8192, 16384], value=h1,
                                      description="H₁ (model width)", style=style),
        "h2_ratio": widgets.IntSlider(value=h2_ratio, min=1, max=8, description="H₂ / H₁",
                                      style=style),
        "system": widgets.Dropdown(options=list(cost.SYSTEMS), value=system,
                                   description="system", style=style),
        "dtype": widgets.Dropdown(options=["bf16", "float32"], value=dtype, description="dtype",
                                  style=style),
    }
    return live(controls, render_mesh2d)
