"""``explore_moe``: experts, k, capacity factor, router skew, devices → load, drops, bytes, time."""

from __future__ import annotations

import ipywidgets as widgets
from matplotlib.figure import Figure

from tpviz.core.collectives import html_table
from tpviz.core.cost import SYSTEMS
from tpviz.core.layout import dtype_size
from tpviz.core.widgets import STYLE, Live, live
from tpviz.moe.draw import load
from tpviz.moe.plan import aux_loss, plan, route, skewed_logits


def render_moe(experts: int = 32, top_k: int = 2, capacity_factor: float = 1.25,
               skew: float = 0.0, devices: int = 8, system: str = "H100 (NVLink)",
               tokens: int = 4096, hidden: int = 4096, ffn: int = 14336,
               dtype: str = "bf16") -> tuple[str, Figure]:
    """A table (capacity, drops, aux loss, bytes and time per layer) and the load per expert of
    a synthetic router (:func:`tpviz.moe.plan.skewed_logits`) on ``tokens`` tokens."""
    p = plan(tokens, experts, top_k, capacity_factor, devices, hidden, ffn, dtype)
    r = route(skewed_logits(tokens, experts, skew), top_k, capacity_factor, devices)
    estimate = p.time(SYSTEMS[system])
    a2a, tp = p.collectives(), p.tensor_parallel_collectives()
    mib, size = 2**20, dtype_size(dtype)
    rows = [("capacity C per expert and group", f"{p.capacity:,} (groups of {p.group_tokens:,}"
             f" tokens)"),
            ("choices dropped", f"{r.dropped:.1%}"),
            ("load-balancing loss α·E·Σ f·P", f"{aux_loss(r.probs, r.experts):.4f} "
             "(balanced: 0.0100)"),
            ("expert weights per device", f"{p.expert_params_per_device * size / mib:,.0f} MiB "
             f"({p.experts_per_device} experts)"),
            ("all-to-all buffer [E, C, H] per device", f"{p.dispatch_bytes / mib:,.1f} MiB"),
            ("sent per device, forward (2 all-to-alls)", f"{a2a.sent_bytes() / mib:,.1f} MiB"),
            ("same FFN tensor-parallel: all-reduce sends", f"{tp.sent_bytes() / mib:,.1f} MiB"),
            (f"forward time on {system}", f"compute {estimate.compute_s * 1e3:,.2f} ms, "
             f"all-to-alls {estimate.comm_s * 1e3:,.2f} ms ({estimate.bound}-bound)")]
    fig = load(r, devices)
    return html_table(("", f"T = {tokens:,}, H = {hidden:,}, F = {ffn:,}, {dtype}"), rows), fig


def explore_moe(experts: int = 32, top_k: int = 2, capacity_factor: float = 1.25,
                skew: float = 0.0, devices: int = 8, system: str = "H100 (NVLink)") -> Live:
    """Experts, k, capacity factor, router skew and devices → load per expert against capacity,
    drops, all-to-all bytes per device and the forward time of the layer on a chosen system."""
    controls = {
        "experts": widgets.SelectionSlider(options=[4, 8, 16, 32, 64, 128], value=experts,
                                           description="experts E", style=STYLE),
        "top_k": widgets.IntSlider(value=top_k, min=1, max=4, description="top-k", style=STYLE),
        "capacity_factor": widgets.SelectionSlider(
            options=[0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0], value=capacity_factor,
            description="capacity factor", style=STYLE),
        "skew": widgets.SelectionSlider(options=[0.0, 0.5, 1.0, 2.0, 3.0], value=skew,
                                        description="router skew", style=STYLE),
        "devices": widgets.Dropdown(options=[1, 2, 4, 8, 16], value=devices,
                                    description="devices N", style=STYLE),
        "system": widgets.Dropdown(options=list(SYSTEMS), value=system, description="system",
                                   style=STYLE),
    }
    return live(controls, render_moe)
