"""``explore_decode``: system × chips × batch × context × dtype → one decode step of a model,
its terms on the roofline, latency, throughput and cost per million tokens."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core import hardware as hw
from tpviz.core import validate
from tpviz.core.collectives import html_table
from tpviz.core.kinds import Index
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.core.widgets import Controls, Live, live
from tpviz.inference.draw import decode_times
from tpviz.inference.plan import BYTES, critical_batch, decode, model_of
from tpviz.inference.serve import CHIP_HOUR

SYSTEMS = ("TPU v5e", "TPU v5p", "H100")
CHIPS = (1, 2, 4, 8, 16, 32, 64)
BATCHES = (1, 4, 16, 64, 256)
CONTEXTS = (1024, 4096, 16384, 65536)


def _words(step, chip_hour: float) -> list[str]:
    held = f"{step.held_bytes / 1e9:,.1f} of {step.hbm_bytes / 1e9:,.0f} GB per chip"
    return [f"{step.seconds * 1e3:,.2f} ms per token ({step.bound}-bound), "
            f"{step.per_chip:,.0f} tokens/s per chip, "
            f"${step.cost_per_million(chip_hour):,.2f} per million tokens at "
            f"${chip_hour:g} per chip-hour",
            (f"holds {held}" if step.fits else f"does not fit: {held}")]


def render_decode(model: str = "LLaMA-3 70B", system: str = "TPU v5e", chips: int = 16,
                  batch: int = 32, context: int = 8192, dtype: str = "int8",
                  chip_hour: float | None = None) -> tuple[str, Figure]:
    """A table of one decode step's terms and the curves against the batch and of latency
    against throughput (``core.hardware`` prices; chip-hours from ``CHIP_HOUR`` unless
    given)."""
    m = model_of(model)
    system = validate.choice("system", system, hw.SYSTEMS)
    price = CHIP_HOUR.get(system, 1.0) if chip_hour is None else chip_hour
    step = decode(m, system, chips, batch, context, dtype)
    rows = [("read the weights", f"{step.matmul.memory_s * 1e3:,.3f}"),
            ("read the KV caches", f"{step.attention.memory_s * 1e3:,.3f}"),
            ("FLOPs", f"{step.compute_s * 1e3:,.3f}"),
            ("all-reduces (latency + bandwidth)", f"{step.comm_s * 1e3:,.3f}"),
            ("step", f"{step.seconds * 1e3:,.3f} ({step.bound}-bound)")]
    note = (f"<p>{'; '.join(_words(step, price))}. B_crit = "
            f"{critical_batch(system, dtype):,.0f} (dotted).</p>")
    fig = decode_times(m, system, chips, context, dtype, marked=batch)
    return html_table(("term", "ms"), rows) + note, fig


def explore_decode(model: str = "LLaMA-3 70B", system: str = "TPU v5e", chips: int = 16,
                   batch: int = 32, context: int = 8192, dtype: str = "int8") -> Live:
    """System, chips, batch, context and dtype → one decode step's terms, latency, throughput
    and cost, and the latency/throughput curves."""
    c = Controls("explore_decode")
    controls = {
        "model": c.dropdown("model", model, hw.MODELS, "model"),
        "system": c.dropdown("system", system, SYSTEMS, "system"),
        "chips": c.dropdown("chips", chips, (*CHIPS, 128, 256), "chips N"),
        "batch": c.select_slider("batch", batch, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
                                 "batch B"),
        "context": c.select_slider("context", context, (1024, 2048, 4096, 8192, 16384, 32768,
                                                        65536, 131072), "context S"),
        "dtype": c.dropdown("dtype", dtype, BYTES, "weights and cache"),
    }
    return live(controls, render_decode, figure=LIVE)


def decode_rows(system: str, chips: int, batch: int, context: Index, dtype: str,
                model: str = "LLaMA-3 70B") -> list[dict]:
    """The live figure's rows: the step's four terms as bars, its latency, throughput, cost
    and whether it fits in words."""
    step = decode(model, system, chips, batch, context, dtype)
    terms = [("read the weights", step.matmul.memory_s), ("read the KV caches",
                                                          step.attention.memory_s),
             ("FLOPs", step.compute_s), ("all-reduces", step.comm_s)]
    largest = max(t for _, t in terms)
    items = [(name, t * 1e3, f"{t * 1e3:,.2f} ms", t == largest) for name, t in terms]
    return bar_rows(items, [f"{model_of(model).name} on {step.chips} × {system}, B = {batch}, "
                            f"S = {context:,}, {dtype}:", *_words(step, CHIP_HOUR[system])])


LIVE = LiveFigure(
    controls={"system": Grid(list(SYSTEMS), "system", start="TPU v5e"),
              "chips": Grid(list(CHIPS), "chips N", start=16),
              "batch": Grid(list(BATCHES), "batch B", start=16),
              "context": Grid(list(CONTEXTS), "context S", start=4096),
              "dtype": Grid(["bf16", "int8"], "weights and cache", start="int8")},
    rows=decode_rows, chart=lambda base: words_and_bars(base, "ms per decode step"))

# settings the benchmarks time: the defaults and the largest the widget offers
BENCHMARKS = [(render_decode, dict(system="TPU v5e", chips=16, batch=32, context=8192)),
              (render_decode, dict(system="H100", chips=256, batch=512, context=131072,
                                   dtype="bf16"))]
