"""``explore_together``: a GPT-3-sized model, a cluster and a strategy → memory, time and MFU,
next to the planner's best configuration for the same GPUs."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core.collectives import html_table
from tpviz.core.kinds import OneOf
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.core.widgets import Controls, Live, live
from tpviz.errors import ArgumentError
from tpviz.together.draw import memory_bars
from tpviz.together.memory import RECOMPUTE
from tpviz.together.plan import CLUSTERS, MODELS, plan
from tpviz.together.search import cached_best


def render_together(model: str = "GPT-3 175B", cluster: str = "A100 80GB (Selene)",
                    tensor: int = 8, pipeline: int = 8, data: int = 16, microbatch: int = 1,
                    zero_stage: OneOf((0, 1, 2, 3)) = 1, recompute: str = "full",
                    sequence_parallel: bool = False) -> tuple[str, Figure]:
    """A table and bars of the reader's configuration and the planner's best on as many GPUs
    (the search is cached per model, cluster and GPU count)."""
    mine = plan(model, cluster, tensor, pipeline, data, microbatch, zero_stage, recompute,
                sequence_parallel)
    best = cached_best(model, cluster, mine.devices)
    if best is None:
        raise ArgumentError(f"nothing fits {model} on {mine.devices} GPUs; use more GPUs.")
    rows = [(name, p.label(), f"{p.total_memory / 1e9:,.1f} GB" + ("" if p.fits else " ✗"),
             f"{p.step_s:,.2f} s", f"{p.mfu:.0%}") for name, p in (("yours", mine),
                                                                   ("best", best))]
    table = html_table(("", f"{model} on {mine.devices:,} GPUs", "memory", "step", "MFU"),
                       rows)
    return table, memory_bars([mine, best], ["yours", "best"])


def explore_together(model: str = "GPT-3 175B", cluster: str = "A100 80GB (Selene)") -> Live:
    """Model, cluster, t, p, d, microbatch, ZeRO stage and recomputation → memory per device,
    step time (compute, exposed communication per axis, bubble) and MFU, and the best plan."""
    c = Controls("explore_together")
    controls = {
        "model": c.dropdown("model", model, list(MODELS), "model"),
        "cluster": c.dropdown("cluster", cluster, list(CLUSTERS), "cluster"),
        "tensor": c.dropdown("tensor", 8, [1, 2, 4, 8, 16], "tensor t"),
        "pipeline": c.dropdown("pipeline", 8, [1, 2, 4, 8, 16, 32, 64], "pipeline p"),
        "data": c.dropdown("data", 16, [1, 2, 4, 8, 16, 32, 64], "data d"),
        "microbatch": c.dropdown("microbatch", 1, [1, 2, 4, 8], "microbatch b"),
        "zero_stage": c.dropdown("zero_stage", 1, [0, 1, 2, 3], "ZeRO stage"),
        "recompute": c.dropdown("recompute", "full", list(RECOMPUTE), "recompute"),
        "sequence_parallel": c.checkbox("sequence_parallel", False, "sequence parallel"),
    }
    return live(controls, render_together, figure=LIVE)


def together_rows(model: str, tensor: int, pipeline: int, data: int, zero_stage: int,
                  recompute: str) -> list[dict]:
    """The live figure's rows (from :func:`tpviz.together.plan.plan`, on the default cluster,
    microbatch 1): GB per device by category, then the step's time and MFU in words."""
    p = plan(model, "A100 80GB (Selene)", tensor, pipeline, data, 1, zero_stage, recompute,
             False)
    items = [(f"{what} (GB per device)", gb / 1e9, f"{gb / 1e9:,.1f} GB")
             for what, gb in p.memory.items()]
    items.append(("total (GB per device)", p.total_memory / 1e9,
                  f"{p.total_memory / 1e9:,.1f} GB" + ("" if p.fits else " — does not fit"),
                  True))
    comm = ", ".join(f"{axis} {s:,.2f} s" for axis, s in p.comm_s.items())
    return bar_rows(items, [f"{model} on {p.devices:,} GPUs (t={tensor}, p={pipeline}, "
                            f"d={data}, ZeRO {zero_stage}, recompute {recompute})",
                            f"step {p.step_s:,.2f} s: compute {p.compute_s:,.2f} s, bubble "
                            f"{p.bubble_s:,.2f} s, exposed communication {comm}; MFU "
                            f"{p.mfu:.0%}"])


LIVE = LiveFigure(
    controls={"model": Grid(["GPT-3 13B", "GPT-3 175B"], "model", start="GPT-3 175B"),
              "tensor": Grid([1, 2, 4, 8], "tensor t", start=8),
              "pipeline": Grid([1, 4, 8, 16], "pipeline p", start=8),
              "data": Grid([1, 8, 16], "data d", start=16),
              "zero_stage": Grid([0, 1, 3], "ZeRO stage", start=1),
              "recompute": Grid(list(RECOMPUTE), "recompute", start="full")},
    rows=together_rows, chart=lambda base: words_and_bars(base, "GB"))


# settings the benchmarks time: the defaults (the search cached after the first call) and 1T
BENCHMARKS = [(render_together, dict(model="GPT-3 175B", tensor=8, pipeline=8, data=16)),
              (render_together, dict(model="PTD-P 1T", tensor=8, pipeline=64, data=6))]
