"""``explore_matmul``: shapes, mesh and shardings of In and W1 → the drawing and the cost model."""

from __future__ import annotations

import textwrap

import jax.numpy as jnp
from matplotlib.figure import Figure

from tpviz.core import compiled, cost
from tpviz.core.kinds import HELD, OneOf, Size, SystemLike
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.core.notation import parse
from tpviz.core.widgets import Controls, Live, live
from tpviz.devices import make_mesh
from tpviz.layouts.explore import MESHES
from tpviz.matmul.draw import figure
from tpviz.matmul.plan import plan
from tpviz.matmul.run import explicit


def render_matmul(mesh: OneOf(MESHES), x: str, w: str, b: Size(2**16, HELD),
                  d: Size(2**16, HELD), f: Size(2**16, HELD), system: SystemLike,
                  reduce_scatter: bool = False, show_compiled: bool = False) -> Figure:
    """The figure ``explore_matmul`` shows; with ``show_compiled``, also the compiled program's
    collectives."""
    p = plan((b, d), (d, f), parse(x).spec, parse(w).spec, MESHES[mesh],
                    dtype="bf16", reduce_scatter=reduce_scatter)
    fig = figure(p, system=cost.system(system))
    if show_compiled:
        m = make_mesh(tuple(MESHES[mesh].values()), tuple(MESHES[mesh]))
        found = compiled.collectives(explicit(p, m), jnp.zeros((b, d), jnp.bfloat16),
                                jnp.zeros((d, f), jnp.bfloat16))
        text = "; ".join(f"{c.kind} {c.dtype}{list(c.shape)} ({c.bytes:,} bytes) over "
                         f"{c.group_size} devices" for c in found) or "no collectives"
        lines = textwrap.wrap(f"compiled shard_map program: {text}", 110)  # inside the image
        # under the arrays' tick labels
        fig.axes[0].get_gridspec().update(bottom=0.1 + 0.035 * len(lines))
        for ax in fig.axes:
            ax.set_position(ax.get_subplotspec().get_position(fig))
        fig.text(0.5, 0.01, "\n".join(lines), fontsize=9, ha="center")
    return fig


def explore_matmul(mesh: str = "X=2, Y=4", x: str = "In[B_X, D_Y]", w: str = "W1[D_Y, F]",
                   b: int = 1024, d: int = 4096, f: int = 4096,
                   system: str = "TPU v5e (ICI)") -> Live:
    """Shapes, mesh and shardings of In and W1 → the drawing, what moves, and the cost model."""
    sizes = [256, 512, 1024, 2048, 4096, 8192, 16384]
    c = Controls("explore_matmul")
    controls = {
        "mesh": c.dropdown("mesh", mesh, MESHES, "mesh"),
        "x": c.text_box("x", x, "In"),
        "w": c.text_box("w", w, "W1"),
        "b": c.select_slider("b", b, sizes, "B"),
        "d": c.select_slider("d", d, sizes, "D"),
        "f": c.select_slider("f", f, sizes, "F"),
        "system": c.dropdown("system", system, cost.SYSTEMS, "system"),
        "reduce_scatter": c.checkbox("reduce_scatter", False, "reduce-scatter (case 3)"),
        "show_compiled": c.checkbox("show_compiled", False, "compile and list collectives"),
    }
    return live(controls, render_matmul, figure=LIVE)


# the cases of the chapter, as the live figure's choices of (In, W1), in the notation page's names
CASES = {"In[B_X, D_Y] · W1[D_Y, F]": ("In[B_X, D_Y]", "W1[D_Y, F]"),
         "In[B_X, D] · W1[D, F_Y]": ("In[B_X, D]", "W1[D, F_Y]"),
         "In[B_X, D_Y] · W1[D, F_Y]": ("In[B_X, D_Y]", "W1[D, F_Y]"),
         "In[B, D_X] · W1[D_X, F_Y]": ("In[B, D_X]", "W1[D_X, F_Y]"),
         "In[B_X, D_Y] · W1[D, F] (gather In)": ("In[B_X, D_Y]", "W1[D, F]"),
         "In[B_X, D] · W1[D_X, F] (FSDP)": ("In[B_X, D]", "W1[D_X, F]")}


def matmul_rows(shardings: str, b: int, d: int, f: int, system: str, reduce_scatter: bool,
                mesh: str = "X=2, Y=4") -> list[dict]:
    """The live figure's rows (from :func:`tpviz.matmul.plan.plan` and
    :func:`tpviz.core.cost.estimate`): compute and communication time, and what moves."""
    x, w = CASES[shardings]
    p = plan((b, d), (d, f), parse(x).spec, parse(w).spec, MESHES[mesh], dtype="bf16",
             reduce_scatter=reduce_scatter)
    e = cost.estimate(p.flops, p.collectives, cost.system(system))
    moves = [f"{c.kind} over {c.group_size} devices: {c.bytes:,} bytes per device"
             for c in p.collectives] or ["no communication"]
    return bar_rows([("compute", e.compute_s * 1e6, f"{e.compute_s * 1e6:,.3g} µs"),
                     ("communication", e.comm_s * 1e6, f"{e.comm_s * 1e6:,.3g} µs → "
                      f"{e.bound}-bound", True)], [p.describe(), *moves])


# the static figure's systems (the widget offers every one of cost.SYSTEMS)
LIVE_SYSTEMS = ["TPU v5e (ICI)", "TPU v5p (ICI)", "TPU v6e (ICI)", "H100 (NVLink)",
                "H100 cluster (NVLink + InfiniBand)", "A100 cluster (NVLink + InfiniBand)"]
LIVE = LiveFigure(
    controls={"shardings": Grid(list(CASES), "In · W1"),
              "b": Grid([256, 2048, 16384], "B", start=2048),
              "d": Grid([256, 2048, 16384], "D", start=2048),
              "f": Grid([256, 2048, 16384], "F", start=2048),
              "system": Grid(LIVE_SYSTEMS, "system", start="TPU v5e (ICI)"),
              "reduce_scatter": Grid([False, True], "reduce-scatter (case 3)")},
    rows=matmul_rows, chart=lambda base: words_and_bars(base, "µs"))


_DEFAULTS = dict(mesh="X=2, Y=4", x="In[B_X, D_Y]", w="W1[D_Y, F]", b=1024, d=4096, f=4096,
                 system="TPU v5e (ICI)", reduce_scatter=True)
# settings the benchmarks time (benchmarks/budgets.py finds this list in every topic); the
# redraw that compiles a program has a budget of 1 s
BENCHMARKS = [(render_matmul, _DEFAULTS), (render_matmul, {**_DEFAULTS, "show_compiled": True})]
