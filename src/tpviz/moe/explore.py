"""``explore_moe``: experts, k, capacity factor, router skew, devices → load, drops, bytes, time."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core.collectives import html_table
from tpviz.core.cost import SYSTEMS
from tpviz.core.cost import system as system_named
from tpviz.core.figures import palette
from tpviz.core.layout import dtype_size
from tpviz.core.live import Grid, LiveFigure, notes
from tpviz.core.validate import choice, number
from tpviz.core.widgets import Controls, Live, live
from tpviz.moe.draw import load
from tpviz.moe.plan import Factor, aux_loss, plan, route
from tpviz.moe.synthetic import skewed_logits


def render_moe(experts: int = 32, top_k: int = 2, capacity_factor: Factor = 1.25,
               skew: float = 0.0, devices: int = 8, system: str = "H100 (NVLink)",
               tokens: int = 4096, hidden: int = 4096, ffn: int = 14336,
               dtype: str = "bf16") -> tuple[str, Figure]:
    """A table (capacity, drops, aux loss, bytes and time per layer) and the load per expert of
    a synthetic router (:func:`tpviz.moe.synthetic.skewed_logits`) on ``tokens`` tokens."""
    system = choice("system", system, SYSTEMS)
    skew = number("skew", skew)
    logits = skewed_logits(tokens, experts, skew)  # refuses a size beyond its limit at once
    p = plan(tokens, experts, top_k, capacity_factor, devices, hidden, ffn, dtype)
    r = route(logits, top_k, capacity_factor, devices)
    estimate = p.time(system_named(system))
    a2a, tp = p.collectives(), p.tensor_parallel_collectives()
    mib, size = 2**20, dtype_size(dtype)
    node = system_named(system).node
    links = (f" (the group spans {devices // node} nodes of {node})" if node and devices > node
             else "")
    rows = [("capacity C per expert and group", f"{p.capacity:,} (groups of {p.group_tokens:,}"
             f" tokens)"),
            ("choices dropped", f"{r.dropped:.1%}"),
            ("load-balancing loss λ·E·Σ f·P", f"{aux_loss(r.probs, r.experts):.4f} "
             "(balanced: 0.0100)"),
            ("expert weights per device", f"{p.expert_params_per_device * size / mib:,.0f} MiB "
             f"({p.experts_per_device} experts)"),
            ("all-to-all buffer [E, C, H] per device", f"{p.dispatch_bytes / mib:,.1f} MiB"),
            ("sent per device, forward (2 all-to-alls)", f"{a2a.sent_bytes() / mib:,.1f} MiB"),
            ("same FFN tensor-parallel: all-reduce sends", f"{tp.sent_bytes() / mib:,.1f} MiB"),
            (f"forward time on {system}", f"compute {estimate.compute_s * 1e3:,.2f} ms, "
             f"all-to-alls {estimate.comm_s * 1e3:,.2f} ms; in series (the experts wait "
             f"for the dispatch, the combine for the experts): {estimate.serial_s * 1e3:,.2f} ms"),
            ("one all-to-all", f"{_a2a(p, system)}{links}")]
    fig = load(r, devices)
    return html_table(("", f"T = {tokens:,}, H = {hidden:,}, F = {ffn:,}, {dtype}"), rows), fig


def _a2a(p, system: str) -> str:
    """One all-to-all's price on ``system`` (:mod:`tpviz.core.hardware`) and what bounds it."""
    if p.devices == 1:
        return "none (one device)"
    price = SYSTEMS[system].price(p.collectives()[0])
    return f"{price.seconds * 1e3:,.3f} ms, {price.bound}-bound"


def explore_moe(experts: int = 32, top_k: int = 2, capacity_factor: Factor = 1.25,
                skew: float = 0.0, devices: int = 8, system: str = "H100 (NVLink)") -> Live:
    """Experts, k, capacity factor, router skew and devices → load per expert against capacity,
    drops, all-to-all bytes per device and the forward time of the layer on a chosen system."""
    c = Controls("explore_moe")
    controls = {
        "experts": c.select_slider("experts", experts, [4, 8, 16, 32, 64, 128], "experts E"),
        "top_k": c.int_slider("top_k", top_k, 1, 4, "top-k"),
        "capacity_factor": c.select_slider("capacity_factor", capacity_factor,
                                           [0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0],
                                           "capacity factor"),
        "skew": c.select_slider("skew", skew, [0.0, 0.5, 1.0, 2.0, 3.0], "router skew"),
        "devices": c.dropdown("devices", devices, [1, 2, 4, 8, 16], "devices N"),
        "system": c.dropdown("system", system, SYSTEMS, "system"),
    }
    return live(controls, render_moe, figure=LIVE)


def moe_rows(experts: int, top_k: int, capacity_factor: float, skew: float, devices: int,
             system: str = "H100 (NVLink)", tokens: int = 4096, hidden: int = 4096,
             ffn: int = 14336, dtype: str = "bf16") -> list[dict]:
    """The live figure's rows (from :mod:`tpviz.moe.plan`): choices each expert takes and
    drops against the capacity, and the layer's numbers in words."""
    from matplotlib.colors import to_hex

    p = plan(tokens, experts, top_k, capacity_factor, devices, hidden, ffn, dtype)
    r = route(skewed_logits(tokens, experts, skew), top_k, capacity_factor, devices)
    estimate, mib = p.time(system_named(system)), 2**20
    colours = [to_hex(c) for c in palette(devices) for _ in range(experts // devices)]
    routed, kept = r.load(), r.kept()
    rows = [{"expert": e, "part": part, "n": int(n), "colour": colour}
            for e in range(experts) for part, n, colour in (
                ("kept", kept[e], colours[e]), ("dropped", routed[e] - kept[e], "#f4c7b3"))]
    rows.append({"capacity": r.groups * r.capacity})
    rows += [{"note": f"{r.dropped:.1%} of the choices dropped; capacity {r.groups} × "
                      f"{r.capacity} per expert; colour: the device holding the expert"},
             {"note": f"all-to-alls send {p.collectives().sent_bytes() / mib:,.1f} MiB per "
                      f"device (forward); aux loss {aux_loss(r.probs, r.experts):.4f}; forward "
                      f"{estimate.compute_s * 1e3:,.2f} ms compute, {estimate.comm_s * 1e3:,.2f}"
                      f" ms all-to-all on {system}"}]
    return rows


def moe_chart(base):
    """Choices per expert (kept: coloured by device; dropped: pale) and the capacity line."""
    import altair as alt

    load = base.transform_filter("isValid(datum.part)").mark_bar().encode(
        x=alt.X("expert:O", title="expert", axis=alt.Axis(labelOverlap=True)),
        y=alt.Y("sum(n):Q", title="token-choices"), color=alt.Color("colour:N", scale=None),
        order=alt.Order("part:N", sort="descending"))
    line = base.transform_filter("isValid(datum.capacity)").mark_rule(
        color="black", strokeDash=[4, 3]).encode(y="capacity:Q")
    return alt.vconcat(notes(base), alt.layer(load, line).properties(width=640, height=220))


LIVE = LiveFigure(
    controls={"experts": Grid([8, 32, 64], "experts E", start=32),
              "top_k": Grid([1, 2], "top-k", start=2),
              "capacity_factor": Grid([1.0, 1.25, 2.0], "capacity factor", start=1.25),
              "skew": Grid([0.0, 1.0, 3.0], "router skew"),
              "devices": Grid([4, 8], "devices N", start=8)},
    rows=moe_rows, chart=moe_chart)


# settings the benchmarks time: the defaults and the largest the widget offers
BENCHMARKS = [(render_moe, dict(experts=32, top_k=2, capacity_factor=1.25, skew=0.0, devices=8,
                                system="H100 (NVLink)")),
              (render_moe, dict(experts=128, top_k=4, capacity_factor=3.0, skew=3.0, devices=16,
                                system="H100 (NVLink)"))]
