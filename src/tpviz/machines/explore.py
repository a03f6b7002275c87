"""``explore_network`` (system × slice or cluster × group × collective × bytes → time and what
bounds it) and ``explore_roofline`` (chip × dtype × batch → a matmul's place on the roofline)."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core import hardware as hw
from tpviz.core.collectives import html_table
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.core.validate import choice, flag, integer, number
from tpviz.core.widgets import Controls, Live, live
from tpviz.machines.draw import collective_curve, roofline

# the machines the explorer offers: a TPU slice shape or a GPU count
MACHINES = {
    "TPU v5e 16×16": ("TPU v5e", (16, 16)), "TPU v5e 8×16": ("TPU v5e", (8, 16)),
    "TPU v5e 4×4": ("TPU v5e", (4, 4)), "TPU v6e 16×16": ("TPU v6e", (16, 16)),
    "TPU v5p 4×4×4": ("TPU v5p", (4, 4, 4)), "TPU v5p 2×2×4": ("TPU v5p", (2, 2, 4)),
    "TPU v5p 16×16×16": ("TPU v5p", (16, 16, 16)), "TPU v4p 4×4×4": ("TPU v4p", (4, 4, 4)),
    "H100 ×256 (32 nodes)": ("H100", 256), "H100 + SHARP ×256": ("H100 + SHARP", 256),
    "A100 ×256 (32 nodes)": ("A100", 256), "B200 ×256 (32 nodes)": ("B200", 256),
}
GROUPS = ("first axis / one node", "two axes / two nodes", "every axis / all GPUs")
MEGABYTES = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)


def network_price(machine: str, group: str, kind: str):
    """``nbytes -> Price`` for ``kind`` over ``group`` of ``machine`` (names above)."""
    name, shape = MACHINES[choice("machine", machine, MACHINES)]
    level = GROUPS.index(choice("group", group, GROUPS))
    kind = choice("kind", kind, hw.KINDS)
    if isinstance(shape, tuple):
        s = hw.tpu(name, shape)
        axes = tuple(range(min(level + 1, len(shape)) if level < 2 else len(shape)))
        return (lambda v: s.price(kind, v, axes)), f"{name} {shape}, axes {axes}"
    c = hw.gpu_cluster(name, shape)
    per = c.system.gpus_per_node
    gpus = (per, 2 * per, shape)[level]
    return (lambda v: c.price(kind, v, gpus)), f"{name}: {gpus} GPUs ({gpus // per} node(s))"


def render_network(machine: str = "TPU v5e 16×16", group: str = GROUPS[0],
                   kind: str = "all-gather", megabytes: float = 10.0) -> tuple[str, Figure]:
    """A table (time, latency term, bandwidth term, what bounds it) and the time against V."""
    price, label = network_price(machine, group, kind)
    v = number("megabytes", megabytes, positive=True) * 1e6
    p = price(v)
    us = 1e6
    rows = [("group", label), ("time", f"{p.seconds * us:,.1f} µs"),
            ("latency term (hops × α)", f"{p.latency_s * us:,.1f} µs"),
            ("bandwidth term", f"{p.bandwidth_s * us:,.1f} µs over {p.link}"),
            ("bounded by", p.bound)]
    fig = collective_curve(price, f"{kind} on {label}", marked=v)
    return html_table(("", f"{kind} of V = {megabytes:g} MB"), rows), fig


def explore_network(machine: str = "TPU v5e 16×16", group: str = GROUPS[0],
                    kind: str = "all-gather", megabytes: float = 10.0) -> Live:
    """Machine, group, collective and V → its time, latency and bandwidth terms, and the bound."""
    c = Controls("explore_network")
    controls = {"machine": c.dropdown("machine", machine, MACHINES, "machine"),
                "group": c.dropdown("group", group, GROUPS, "group"),
                "kind": c.dropdown("kind", kind, hw.KINDS, "collective"),
                "megabytes": c.select_slider("megabytes", megabytes, MEGABYTES, "V (MB)")}
    return live(controls, render_network, figure=LIVE)


def network_rows(machine: str, group: str, kind: str, megabytes: float) -> list[dict]:
    """The live figure's rows: the two terms as bars, the time and the bound in words."""
    price, label = network_price(machine, group, kind)
    p = price(megabytes * 1e6)
    us = 1e6
    return bar_rows([("latency term", p.latency_s * us, f"{p.latency_s * us:,.1f} µs",
                      p.bound == "latency"),
                     ("bandwidth term", p.bandwidth_s * us, f"{p.bandwidth_s * us:,.1f} µs",
                      p.bound != "latency")],
                    [f"{kind} of {megabytes:g} MB on {label}",
                     f"{p.seconds * us:,.1f} µs, {p.bound}-bound"])


LIVE = LiveFigure(
    controls={"machine": Grid(list(MACHINES), "machine"), "group": Grid(list(GROUPS), "group"),
              "kind": Grid(list(hw.KINDS), "collective"),
              "megabytes": Grid(list(MEGABYTES), "V (MB)", start=10.0)},
    rows=network_rows, chart=lambda base: words_and_bars(base, "µs"))

CHIPS = ("TPU v5e", "TPU v5p", "TPU v6e", "TPU v4p", "H100", "A100", "B200")
BATCHES = (16, 32, 64, 128, 256, 512, 1024, 4096)


def _dtype(chip: str, eight_bit: bool) -> str:
    if not flag("eight_bit", eight_bit):
        return "bf16"
    return "int8" if "int8" in hw.CHIPS[chip].flops else "fp8"


def render_roofline(chip: str = "TPU v5e", eight_bit: bool = False, batch: int = 256
                    ) -> tuple[str, Figure]:
    """A matmul ``X[B, 8192] · W[8192, 8192]`` on ``chip``: its intensity against the ridge."""
    chip, batch = choice("chip", chip, CHIPS), integer("batch", batch, maximum=2**20)
    dtype, d = _dtype(chip, eight_bit), 8192
    size = 1 if dtype != "bf16" else 2
    r = hw.roofline(chip, 2 * batch * d * d, size * (2 * batch * d + d * d), dtype)
    rows = [("intensity", f"{r.intensity:,.0f} FLOPs/byte (ridge {r.ridge:,.0f})"),
            ("compute time", f"{r.compute_s * 1e6:,.1f} µs"),
            ("HBM time", f"{r.memory_s * 1e6:,.1f} µs"), ("bounded by", r.bound)]
    fig = roofline(chip, dtype, batches=sorted({16, 64, 1024, batch}))
    return html_table(("", f"B = {batch}, D = F = {d:,}, {dtype}"), rows), fig


def explore_roofline(chip: str = "TPU v5e", eight_bit: bool = False, batch: int = 256) -> Live:
    """Chip, 8-bit or bf16, batch → a matmul's intensity, times and bound."""
    c = Controls("explore_roofline")
    controls = {"chip": c.dropdown("chip", chip, CHIPS, "chip"),
                "eight_bit": c.checkbox("eight_bit", eight_bit, "int8/fp8"),
                "batch": c.select_slider("batch", batch, BATCHES, "batch B")}
    return live(controls, render_roofline, figure=LIVE_ROOFLINE)


def roofline_rows(chip: str, eight_bit: bool, batch: int) -> list[dict]:
    """The live roofline's rows: compute and HBM time of the matmul, and the bound."""
    dtype, d = _dtype(chip, eight_bit), 8192
    size = 1 if dtype != "bf16" else 2
    r = hw.roofline(chip, 2 * batch * d * d, size * (2 * batch * d + d * d), dtype)
    us = 1e6
    return bar_rows([("compute", r.compute_s * us, f"{r.compute_s * us:,.1f} µs",
                      r.bound == "compute"),
                     ("HBM", r.memory_s * us, f"{r.memory_s * us:,.1f} µs", r.bound == "memory")],
                    [f"{chip}, {dtype}: X[{batch}, {d}] · W[{d}, {d}]: intensity "
                     f"{r.intensity:,.0f} FLOPs/byte, ridge {r.ridge:,.0f}",
                     f"{r.bound}-bound"])


LIVE_ROOFLINE = LiveFigure(
    controls={"chip": Grid(list(CHIPS), "chip"), "eight_bit": Grid([False, True], "int8/fp8"),
              "batch": Grid(list(BATCHES), "batch B", start=256)},
    rows=roofline_rows, chart=lambda base: words_and_bars(base, "µs"))

# settings the benchmarks time: the defaults and the largest the widgets offer
BENCHMARKS = [(render_network, {}),
              (render_network, dict(machine="TPU v5p 16×16×16", group=GROUPS[2],
                                    kind="all-to-all", megabytes=1000.0)),
              (render_roofline, {}), (render_roofline, dict(chip="B200", batch=4096))]
