"""``explore_autoshard``: mesh, bandwidth, batch, hidden size and memory limit → the solver's
choice for one MLP block, beside data parallelism and Megatron."""

from __future__ import annotations

import contextlib

from matplotlib.figure import Figure

from tpviz.autoshard.compare import data_parallel, megatron
from tpviz.autoshard.draw import graph
from tpviz.autoshard.graph import mlp
from tpviz.autoshard.solve import problem, solve_problem
from tpviz.core import cost
from tpviz.core.collectives import html_table
from tpviz.core.kinds import OneOf, Rate
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.core.widgets import Controls, Live, live
from tpviz.errors import ArgumentError

MESHES = {"8": {"X": 8}, "2 × 4": {"X": 2, "Y": 4}, "4 × 2": {"X": 4, "Y": 2}}
GIB = 2**30


def _plans(mesh: str, bandwidth_gbs: float, batch: int, hidden: int, limit_gib: float):
    system = cost.System(f"H100 FLOP/s, {bandwidth_gbs:g} GB/s", cost.SYSTEMS[
        "H100 (NVLink)"].flops, bandwidth_gbs * 1e9, "nvidia2023h100")
    g, shape = mlp(batch, hidden, 4 * hidden, layers=1, dtype="bf16"), MESHES[mesh]
    limit = limit_gib * GIB if limit_gib else None
    p = problem(g, shape, system)
    rows = []
    for name, make in (("data parallel", data_parallel), ("Megatron", megatron)):
        with contextlib.suppress(ArgumentError):  # the sizes do not split that way
            rows.append((name, make(p)))
    return solve_problem(p, memory_limit=limit), rows, limit


def render_autoshard(mesh: OneOf(MESHES) = "8", bandwidth_gbs: Rate = 450.0, batch: int = 8192,
                     hidden: int = 4096, limit_gib: float = 0.0) -> tuple[str, Figure]:
    """The solver's choice (a figure) and a table of its cost beside data parallelism and
    Megatron, for one MLP block with F = 4H in bf16 (``limit_gib`` 0: no memory limit)."""
    best, rows, limit = _plans(mesh, float(bandwidth_gbs), int(batch), int(hidden),
                               float(limit_gib))

    def row(name, s):
        over = " (over the limit)" if limit and s.memory > limit else ""
        return (name, f"{s.cost * 1e3:.3f}", f"{s.memory / GIB:.2f}{over}",
                f"{s.collectives.sent_bytes() / 2**20:,.1f}",
                f"{s.backward.sent_bytes() / 2**20:,.1f}")

    head = ("plan", "ms per step", "GiB per device", "MiB sent forward", "MiB sent backward")
    table = html_table(head, [row("ILP (solver)", best), *(row(n, s) for n, s in rows)])
    table += html_table(("op", "solver's strategy"), list(best.strategies.items()))
    fig = graph(best, per_row=3, notation=False, width=6,
                title=f"mesh {mesh}, B = {batch:,}, H = {hidden:,}, F = 4H")
    return table, fig


def explore_autoshard(mesh: OneOf(MESHES) = "8", bandwidth_gbs: Rate = 450.0, batch: int = 8192,
                      hidden: int = 4096, limit_gib: float = 0.0) -> Live:
    """Mesh shape, bandwidth, batch, hidden size and a memory limit → the ILP's choice and its
    cost next to data parallelism and Megatron."""
    c = Controls("explore_autoshard")
    controls = {
        "mesh": c.dropdown("mesh", mesh, MESHES, "mesh"),
        "bandwidth_gbs": c.select_slider("bandwidth_gbs", bandwidth_gbs,
                                         [25.0, 50.0, 100.0, 225.0, 450.0, 900.0],
                                         "bandwidth W (GB/s)"),
        "batch": c.select_slider("batch", batch, [2**k for k in range(9, 18)],
                                 "batch B (tokens)"),
        "hidden": c.select_slider("hidden", hidden, [512, 1024, 2048, 4096, 8192], "hidden H"),
        "limit_gib": c.select_slider("limit_gib", limit_gib, [0.0, 0.25, 0.5, 1.0, 2.0, 4.0],
                                     "memory limit (GiB, 0: none)"),
    }
    return live(controls, render_autoshard, figure=LIVE)


def autoshard_rows(mesh: str, bandwidth_gbs: float, batch: int, hidden: int,
                   limit_gib: float) -> list[dict]:
    """The live figure's rows (the solver's plans, computed at build time): milliseconds per
    step of the solver's choice, data parallelism and Megatron, and the choice in words."""
    best, rows, limit = _plans(mesh, float(bandwidth_gbs), int(batch), int(hidden),
                               float(limit_gib))
    items = []
    for name, s in (("ILP (solver)", best), *rows):
        over = " over the limit" if limit and s.memory > limit else ""
        items.append((name, s.cost * 1e3, f"{s.cost * 1e3:.3f} ms, {s.memory / GIB:.2f} GiB"
                      f"{over}", name == "ILP (solver)"))
    choice = ", ".join(f"{op}: {how}" for op, how in best.strategies.items())
    return bar_rows(items, [f"mesh {mesh}, B = {batch:,}, H = {hidden:,}, F = 4H, "
                            f"{bandwidth_gbs:g} GB/s", f"solver: {choice}"])


LIVE = LiveFigure(
    controls={"mesh": Grid(list(MESHES), "mesh"),
              "bandwidth_gbs": Grid([25.0, 450.0], "bandwidth W (GB/s)", start=450.0),
              "batch": Grid([512, 8192, 131072], "batch B (tokens)", start=8192),
              "hidden": Grid([1024, 4096], "hidden H", start=4096),
              "limit_gib": Grid([0.0, 0.25, 1.0], "memory limit (GiB, 0: none)")},
    rows=autoshard_rows, chart=lambda base: words_and_bars(base, "ms per step"))


# settings the benchmarks time: the defaults, a 2D mesh, and a memory limit
BENCHMARKS = [(render_autoshard, dict(mesh="8", bandwidth_gbs=450.0, batch=8192, hidden=4096,
                                      limit_gib=0.0)),
              (render_autoshard, dict(mesh="2 × 4", bandwidth_gbs=50.0, batch=131072,
                                      hidden=8192, limit_gib=4.0))]
