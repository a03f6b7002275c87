"""Figures of serving, drawn from plans (never recomputed here)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, ScalarFormatter

from tpviz.core.figures import OKABE_ITO, SMALL_PT, palette
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import Any_, Index, Sizes
from tpviz.inference.paged import Paging
from tpviz.inference.plan import critical_batch, decode, kv_cache_bytes, model_of, weight_bytes

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def kv_growth(model: Any_, contexts: Sizes() = (1024, 4096, 16384, 65536, 131072),
              batches: Sizes() = (1, 8, 64),
              dtype: str = "bf16") -> Figure:
    """Bytes of the KV cache against the context, one line per batch, and the weights' bytes
    (dashed): where a line crosses it, the cache outweighs the model."""
    m = model_of(model)
    fig = column_figure(3.0)
    ax = fig.subplots()
    for b, colour in zip(batches, palette(len(batches)), strict=True):
        ax.plot(contexts, [b * kv_cache_bytes(m, s, dtype) / 1e9 for s in contexts], marker="o",
                color=colour, label=f"batch {b}")
    ax.axhline(weight_bytes(m, dtype) / 1e9, color="black", linestyle="--",
               label=f"weights ({dtype})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context S (tokens per sequence)")
    ax.set_ylabel(f"KV cache, GB ({dtype})")
    ax.set_title(m.name, fontsize=SMALL_PT + 1)
    ax.legend(fontsize=SMALL_PT)
    fig.tight_layout()
    return fig


def decode_times(model: Any_, system: str, chips: int, context: Index, dtype: str = "bf16",
                 batches: Sizes() = BATCHES, contexts: Sizes() = (2048, 8192, 32768),
                 marked: int | None = None
                 ) -> Figure:
    """Left: one decode step's terms against the batch (reading the weights, reading the
    caches, the FLOPs, the all-reduces), B_crit dotted. Right: latency per token against
    throughput per chip, one curve per context, for the batches that fit in HBM."""
    fig = column_figure(3.8)
    left, right = fig.subplots(1, 2)
    steps = [decode(model, system, chips, b, context, dtype) for b in batches]
    terms = {"weights (HBM)": [s.matmul.memory_s for s in steps],
             "KV cache (HBM)": [s.attention.memory_s for s in steps],
             "FLOPs": [s.compute_s for s in steps],
             "all-reduces": [s.comm_s for s in steps]}
    colours = [OKABE_ITO[i] for i in (0, 1, 2, 5)]  # no yellow: thin lines on white
    for (name, values), colour in zip(terms.items(), colours, strict=True):
        left.plot(batches, np.asarray(values) * 1e3, marker="o", markersize=3, color=colour,
                  label=name)
    left.axvline(critical_batch(system, dtype), color="grey", linestyle=":")
    if marked:
        left.axvline(marked, color="black", linewidth=0.8)
    left.set_title(f"{model_of(model).name}, {chips} × {system},\nS = {context:,}, {dtype}",
                   fontsize=SMALL_PT)
    left.set_xlabel("batch B")
    left.set_ylabel("ms per step")
    fitted = False
    for s, colour in zip(contexts, colours, strict=False):
        fit = [d for d in (decode(model, system, chips, b, s, dtype) for b in batches) if d.fits]
        fitted |= bool(fit)
        right.plot([d.per_chip for d in fit], [d.seconds * 1e3 for d in fit], marker="o",
                   markersize=3, color=colour, label=f"S = {s:,}")
    right.set_xlabel("tokens/s per chip")
    right.set_ylabel("ms per token")
    right.set_title("latency against throughput", fontsize=SMALL_PT)
    # both legends under the plots: lines that span a whole axis leave no free corner inside
    for ax, x in ((left, 0.005), (right, 0.53))[:1 + fitted]:
        fig.legend(*ax.get_legend_handles_labels(), loc="lower left", bbox_to_anchor=(x, 0),
                   ncol=2, fontsize=SMALL_PT - 1, frameon=False, handlelength=1.5,
                   columnspacing=1.0)
    for ax in (left, right) if fitted else (left,):
        ax.set_xscale("log", base=2 if ax is left else 10)
        ax.set_yscale("log")
        ax.minorticks_off()  # (with fixed margins: the explorer's redraw stays fast)
    for ax in (left, right):
        ax.tick_params(labelsize=SMALL_PT)
    if fitted:
        right.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        right.yaxis.set_major_formatter(ScalarFormatter())
    else:  # (log axes of no data fail to draw)
        right.set_xticks([])
        right.set_yticks([])
        right.text(0.5, 0.5, f"at no batch does the model\nfit in {chips} × {system}'s HBM",
                   ha="center", va="center", fontsize=SMALL_PT, transform=right.transAxes)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.27, top=0.88, wspace=0.32)
    return fig


def paging(results: dict[str, Sequence[Paging]]) -> Figure:
    """Token slots reserved per token stored, contiguous against paged, for each spread of
    request lengths (``{label: [Paging, ...]}``, one per seed: the bars are the mean, the
    whiskers the range)."""
    fig = column_figure(2.6)
    ax = fig.subplots()
    labels = list(results)
    x = np.arange(len(labels))
    for i, (name, colour) in enumerate(zip(("contiguous", "paged"), palette(2), strict=True)):
        per = [[getattr(p, name) / p.tokens for p in results[k]] for k in labels]
        mean = np.array([np.mean(v) for v in per])
        spread = np.array([[m - min(v), max(v) - m] for m, v in zip(mean, per, strict=True)]).T
        ax.bar(x + (i - 0.5) * 0.38, mean, 0.38, yerr=spread, color=colour, label=name,
               capsize=3)
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=SMALL_PT)
    ax.set_ylabel("slots reserved per token")
    ax.legend(fontsize=SMALL_PT)
    fig.tight_layout()
    return fig
