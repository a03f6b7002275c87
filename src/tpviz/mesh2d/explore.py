"""``explore_mesh2d``: mesh shape, batch and widths → the step table and the comparison."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core import cost
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.core.widgets import Controls, Live, live
from tpviz.errors import ShardingError
from tpviz.mesh2d.choose import best_mesh, compare, step_time
from tpviz.mesh2d.draw import comparison
from tpviz.mesh2d.plan import plan


def render_mesh2d(devices: int, data: int, batch: int, hidden: int, ffn_ratio: int, system: str,
                  dtype: str) -> tuple[str, Figure]:
    """What ``explore_mesh2d`` shows: the step table of the chosen mesh (HTML), then a figure of
    memory and bytes per step beside data parallelism, 1D Megatron and the best mesh shape."""
    if devices % data:
        raise ShardingError(f"data = {data} does not divide {devices} devices; the model axis gets "
                         "devices / data of them. Choose a divisor.")
    ffn = ffn_ratio * hidden
    p = plan(batch, hidden, ffn, (data, devices // data), dtype)
    chosen = cost.system(system)
    t = step_time(p, chosen)
    best = best_mesh(batch, hidden, ffn, devices, chosen, dtype)
    schemes = [s for s in compare(batch, hidden, ffn, devices, dtype)
               if s.name in ("data parallel", "1D Megatron") or s.mesh in (p.mesh_sizes, best)]
    height = 1.6 + 0.36 * len(schemes)
    fig = Figure(figsize=(10, height))
    left, right = fig.subplots(1, 2, sharey=True)
    fig.subplots_adjust(left=0.14, right=0.98, top=1 - 0.9 / height, bottom=0.45 / height,
                        wspace=0.05)
    comparison(schemes, axes=(left, right), chosen=f"2D {data}×{devices // data}")
    fig.suptitle(f"{system}, data={data} × model={devices // data}: compute "
                 f"{t.compute_s * 1e3:,.2f} ms, communication {t.comm_s * 1e3:,.2f} ms per "
                 f"training step → {t.bound}-bound\nleast communication: data={best[0]} × "
                 f"model={best[1]}; below: data parallel, 1D Megatron, this mesh and the best",
                 fontsize=9, x=0.01, y=0.995, ha="left", va="top")
    return p._repr_html_(), fig


def explore_mesh2d(devices: int = 8, data: int = 4, batch: int = 16384, hidden: int = 4096,
                   ffn_ratio: int = 4, system: str = "H100 cluster (NVLink + InfiniBand)",
                   dtype: str = "bf16") -> Live:
    """Mesh shape, batch and hidden sizes → the 2D MLP's step table, memory per device, bytes
    per step, and the comparison with data parallelism and 1D tensor parallelism."""
    c = Controls("explore_mesh2d")
    controls = {
        "devices": c.dropdown("devices", devices, [8, 16, 32, 64, 256], "devices N"),
        "data": c.dropdown("data", data, [1, 2, 4, 8, 16, 32, 64, 128, 256],
                           "data axis N_X (model N_Y = N / N_X)"),
        "batch": c.select_slider("batch", batch, [2**k for k in range(4, 21)],
                                 "batch B (tokens)"),
        "hidden": c.select_slider("hidden", hidden, [256, 512, 1024, 2048, 4096, 8192, 16384],
                              "D (model width)"),
        "ffn_ratio": c.int_slider("ffn_ratio", ffn_ratio, 1, 8, "F / D"),
        "system": c.dropdown("system", system, cost.SYSTEMS, "system"),
        "dtype": c.dropdown("dtype", dtype, ["bf16", "float32"], "dtype"),
    }
    return live(controls, render_mesh2d, figure=LIVE)


def mesh2d_rows(devices: int, data: int, batch: int, hidden: int, ffn_ratio: int, system: str,
                dtype: str = "bf16") -> list[dict]:
    """The live figure's rows (from :mod:`tpviz.mesh2d.choose`): memory and bytes sent per
    device of data parallelism, 1D Megatron, this mesh and the best one; the step time."""
    if devices % data:
        raise ShardingError(f"data = {data} does not divide {devices} devices.")
    ffn, chosen = ffn_ratio * hidden, cost.system(system)
    p = plan(batch, hidden, ffn, (data, devices // data), dtype)
    t, best = step_time(p, chosen), best_mesh(batch, hidden, ffn, devices, chosen, dtype)
    mib, items = 2**20, []
    for s in compare(batch, hidden, ffn, devices, dtype):
        if s.name in ("data parallel", "1D Megatron") or s.mesh in (p.mesh_sizes, best):
            mine = s.mesh == p.mesh_sizes
            held = s.memory.weights_held + s.memory.activations
            items += [(f"{s.name}: memory", held / mib, f"{held / mib:,.0f}", mine),
                      (f"{s.name}: sent per step", s.step_sent / mib,
                       f"{s.step_sent / mib:,.0f}", mine)]
    return bar_rows(items, [
        f"data={data} × model={devices // data} on {system}: compute {t.compute_s * 1e3:,.2f} "
        f"ms, communication {t.comm_s * 1e3:,.2f} ms per step → {t.bound}-bound",
        f"least communication: data={best[0]} × model={best[1]} (bars: MiB per device)"])


LIVE = LiveFigure(
    controls={"devices": Grid([8, 16, 64, 256], "devices N", start=8),
              "data": Grid([1, 2, 4, 8, 16, 32], "data axis N_X", start=4),
              "batch": Grid([1024, 16384, 262144], "batch B (tokens)", start=16384),
              "hidden": Grid([1024, 4096, 16384], "D (model width)", start=4096),
              "system": Grid(["H100 cluster (NVLink + InfiniBand)", "TPU v5p (ICI)"], "system")},
    rows=mesh2d_rows, chart=lambda base: words_and_bars(base, "MiB per device"),
    fixed={"ffn_ratio": 4})


# settings the benchmarks time: the defaults and the largest the widget offers
BENCHMARKS = [(render_mesh2d, dict(devices=8, data=4, batch=16384, hidden=4096, ffn_ratio=4,
                                   system="H100 cluster (NVLink + InfiniBand)", dtype="bf16")),
              (render_mesh2d, dict(devices=256, data=16, batch=1 << 20, hidden=16384, ffn_ratio=8,
                                   system="TPU v5p (ICI)", dtype="bf16"))]
