"""``explore_collectives``: algorithm × N × message size × α, β → steps, bytes, time, crossover."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.collectives.draw import cost_figure, steps_figure
from tpviz.collectives.plan import ALGORITHMS, crossover, line, lower_bound, plan
from tpviz.core import validate
from tpviz.core.collectives import html_table
from tpviz.core.kinds import Rate
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.core.widgets import Controls, Live, live

DEVICES = (2, 3, 4, 5, 6, 8, 16, 32, 64)
SIZES = {"1 KB": 1e3, "64 KB": 6.4e4, "1 MB": 1e6, "16 MB": 1.6e7, "100 MB": 1e8, "1 GB": 1e9}


def render_collectives(algorithm: str = "ring", devices: int = 8, size: str = "1 MB",
                       alpha_us: float = 5.0, beta_gbs: Rate = 50.0) -> tuple[str, Figure]:
    """A table of every algorithm's steps, bytes per device and time at this size (with the
    crossover against the chosen one), the chosen plan's steps drawn (N <= 16), and the times
    against message size."""
    devices = validate.integer("devices", devices, maximum=max(DEVICES),
                               fix=f"The explorer draws N up to {max(DEVICES)}.")
    size = validate.choice("size", size, SIZES)
    nbytes, alpha, beta = SIZES[size], alpha_us * 1e-6, beta_gbs * 1e9
    p = plan(algorithm, "all-reduce", devices, nbytes)  # raises for a bad combination
    rows = []
    for other in ALGORITHMS:
        if other == "halving-doubling" and devices & (devices - 1):
            continue
        steps, slope = line(other, "all-reduce", devices)
        sent = max(plan(other, "all-reduce", devices, 1.0).sent.values(), default=0)
        v = None if other == algorithm else crossover(algorithm, other, devices, alpha,
                                                            beta)
        rows.append((("▶ " if other == algorithm else "") + other, steps,
                     f"{sent * nbytes / 1e6:,.3g} MB",
                     f"{(steps * alpha + slope * nbytes / beta) * 1e3:,.3g} ms",
                     "—" if v is None else f"{v / 1e6:,.3g} MB"))
    html = html_table(("algorithm", "steps", "bytes sent (most, one device)", "time",
                       f"equal to {algorithm} at"), rows)
    html += (f"<p>Lower bound for any all-reduce: 2(N−1)/N·V = "
             f"{lower_bound(devices, nbytes) / 1e6:,.3g} MB per device.</p>")
    if devices <= 16:
        fig = Figure(figsize=(10, 3.2))
        steps_figure(p, per_row=8, labels=False, ax=fig.add_axes((0.0, 0.02, 0.5, 0.86)))
        cost_figure(devices, alpha, beta, nbytes, ax=fig.add_axes((0.59, 0.16, 0.24, 0.74)))
    else:
        fig = cost_figure(devices, alpha, beta, nbytes)
    return html, fig


ALPHAS_US = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
BETAS_GBS = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 450.0, 900.0)


def explore_collectives(algorithm: str = "ring", devices: int = 8, size: str = "1 MB",
                        alpha_us: float = 5.0, beta_gbs: float = 50.0) -> Live:
    """Pick an all-reduce algorithm, N, the message size, α (µs) and β (GB/s): see its steps,
    bytes per device and time next to the other algorithms', and where they cross."""
    c = Controls("explore_collectives")
    controls = {
        "algorithm": c.dropdown("algorithm", algorithm, ALGORITHMS, "algorithm"),
        "devices": c.select_slider("devices", devices, DEVICES, "N"),
        "size": c.select_slider("size", size, SIZES, "V"),
        "alpha_us": c.select_slider("alpha_us", alpha_us, ALPHAS_US, "α (µs)"),
        "beta_gbs": c.select_slider("beta_gbs", beta_gbs, BETAS_GBS, "β (GB/s)"),
    }
    return live(controls, render_collectives, figure=LIVE)


def collectives_rows(algorithm: str, devices: int, size: str, alpha_us: float,
                     beta_gbs: float) -> list[dict]:
    """The live figure's rows (from :func:`tpviz.collectives.plan.line`): the time of an
    all-reduce by every algorithm that runs on N devices, the chosen one in bold."""
    nbytes, alpha, beta = SIZES[size], alpha_us * 1e-6, beta_gbs * 1e9
    plan(algorithm, "all-reduce", devices, nbytes)  # the plan's own error for a bad choice
    items = []
    for other in ALGORITHMS:
        if other == "halving-doubling" and devices & (devices - 1):
            continue
        steps, slope = line(other, "all-reduce", devices)
        ms = (steps * alpha + slope * nbytes / beta) * 1e3
        items.append((other, ms, f"{ms:,.3g} ms ({steps} steps)", other == algorithm))
    bound = lower_bound(devices, nbytes) / beta * 1e3
    return bar_rows(items, [f"N = {devices}, V = {size}, α = {alpha_us:g} µs, "
                            f"W = {beta_gbs:g} GB/s",
                            f"bandwidth lower bound 2(N−1)/N·V/W = {bound:,.3g} ms"])


LIVE = LiveFigure(
    controls={"algorithm": Grid(list(ALGORITHMS), "algorithm", start="ring"),
              "devices": Grid([2, 4, 8, 16, 64], "N", start=8),
              "size": Grid(["1 KB", "64 KB", "1 MB", "100 MB"], "V", start="1 MB"),
              "alpha_us": Grid([1.0, 5.0, 20.0], "α (µs)", start=5.0),
              "beta_gbs": Grid([10.0, 50.0, 450.0], "W (GB/s)", start=50.0)},
    rows=collectives_rows, chart=lambda base: words_and_bars(base, "ms"))


# settings the benchmarks time: the defaults, the largest drawn step grid, the cost curves alone
BENCHMARKS = [(render_collectives, dict(algorithm="ring", devices=8, size="1 MB", alpha_us=5.0,
                                        beta_gbs=50.0)),
              (render_collectives, dict(algorithm="halving-doubling", devices=16, size="1 MB",
                                        alpha_us=5.0, beta_gbs=50.0)),
              (render_collectives, dict(algorithm="tree", devices=DEVICES[-1], size="1 MB",
                                        alpha_us=5.0, beta_gbs=50.0))]
