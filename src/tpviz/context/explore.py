"""``explore_context``: sequence × devices × heads × scheme → bytes, time and memory per layer."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.context.compare import hiding_block, layer
from tpviz.context.draw import COLOURS, scaling
from tpviz.context.plan import SCHEMES
from tpviz.core import validate
from tpviz.core.collectives import html_table
from tpviz.core.cost import SYSTEMS
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.core.validate import choice
from tpviz.core.widgets import Controls, Live, live
from tpviz.errors import TpvizError

HEAD_WIDTH = 128  # d_h of the explorer's model: H = 128 · n_h


def _layers(sequence: int, devices: int, heads: int, system: str, causal: bool,
            kv_heads: int | None = None) -> dict:
    found = {}
    for scheme in SCHEMES:
        try:
            found[scheme] = layer(scheme, sequence, heads, HEAD_WIDTH * heads, devices, system,
                                  causal=causal, kv_heads=kv_heads)
        except TpvizError as e:
            found[scheme] = str(e).split(":")[0]
    return found


def _key(scheme: str, label: str) -> str:
    """The scheme's name beside a square of its colour in the figure: the figure's key."""
    return (f'<span style="color:{COLOURS[scheme]}">&#9632;</span> {label}')


def render_context(sequence: int = 32768, devices: int = 8, heads: int = 32,
                   scheme: str = "ring", system: str = "H100 (NVLink)",
                   causal: bool = True, kv_heads: int | None = None) -> tuple[str, Figure]:
    """A table of the schemes (bytes, time, memory per layer and device; the chosen one first)
    and the curves against the sequence. ``kv_heads``: n_kv (grouped-query attention; default
    n_h)."""
    scheme = choice("scheme", scheme, SCHEMES)
    system = choice("system", system, SYSTEMS)
    sequence = validate.integer("sequence", sequence, maximum=2**24)
    devices = validate.integer("devices", devices, maximum=2**16)
    heads = validate.integer("heads", heads, maximum=2**12)
    kv_heads = None if kv_heads is None else validate.integer("kv_heads", kv_heads,
                                                              maximum=2**12)
    causal = validate.flag("causal", causal)
    found = _layers(sequence, devices, heads, system, causal, kv_heads)
    rows = []
    for name in sorted(SCHEMES, key=lambda s: s != scheme):
        one = found[name]
        if isinstance(one, str):
            rows.append((_key(name, name), one, "", "", ""))
            continue
        label = f"usp (u = {one.ulysses})" if name == "usp" else name
        rows.append((_key(name, label), f"{one.sent_bytes / 2**20:,.1f}",
                     f"{one.compute_s * 1e3:,.3f}",
                     f"{one.exposed_s * 1e3:,.3f} ({one.bound}-bound)",
                     f"{one.memory / 2**30:,.2f}"))
    head = ("scheme", "MiB sent", "compute ms", "exposed comm ms", "activations GiB")
    sequences = [2**k for k in range(12, 20, 2)]
    fig = scaling(sequences, heads, HEAD_WIDTH * heads, devices, system, causal, kv_heads,
                  legend=False)  # the table's coloured names are the key
    try:
        tokens = hiding_block(HEAD_WIDTH * heads, system, devices=devices, heads=heads,
                              kv_heads=kv_heads)
        hides = f"the ring hides a permute from S/N ≥ {tokens:,.0f} tokens"
    except TpvizError as e:
        hides = str(e).split(":")[0]
    note = (f"<p>H = {HEAD_WIDTH * heads:,}, n_kv = {kv_heads or heads}, bf16, one layer's "
            f"forward pass; {hides}.</p>")
    return html_table(head, rows) + note, fig


def explore_context(sequence: int = 32768, devices: int = 8, heads: int = 32,
                    scheme: str = "ring", system: str = "H100 (NVLink)",
                    kv_heads: int = 32) -> Live:
    """Sequence, devices, heads, key/value heads and scheme → bytes sent, compute and exposed
    communication time and activation memory per layer and device, for every scheme."""
    c = Controls("explore_context")
    controls = {
        "sequence": c.select_slider("sequence", sequence, [2**k for k in range(11, 20)],
                                    "sequence S"),
        "devices": c.dropdown("devices", devices, [2, 4, 8, 16, 32, 64], "devices N"),
        "heads": c.dropdown("heads", heads, [8, 16, 32, 64, 128], "heads n_h"),
        "kv_heads": c.dropdown("kv_heads", kv_heads, [1, 2, 4, 8, 16, 32, 64, 128],
                               "key/value heads n_kv"),
        "scheme": c.dropdown("scheme", scheme, SCHEMES, "scheme"),
        "system": c.dropdown("system", system, SYSTEMS, "system"),
    }
    return live(controls, render_context, figure=LIVE)


def context_rows(sequence: int, devices: int, heads: int, scheme: str,
                 system: str = "H100 (NVLink)") -> list[dict]:
    """The live figure's rows: the chosen scheme's numbers in words, and every scheme's
    time per layer (compute + exposed communication) as bars, the chosen one darker."""
    found = _layers(sequence, devices, heads, system, True)
    items, lines = [], []
    for name, one in found.items():
        if isinstance(one, str):
            lines.append(f"{name}: {one}")
            continue
        items.append((name, one.time_s * 1e3, f"{one.time_s * 1e3:,.2f} ms · "
                      f"{one.sent_bytes / 2**20:,.0f} MiB · {one.memory / 2**30:,.2f} GiB",
                      name == scheme))
    chosen = found[scheme]
    if not isinstance(chosen, str):
        lines.insert(0, f"{scheme}: sends {chosen.sent_bytes / 2**20:,.1f} MiB per device, "
                        f"{chosen.exposed_s * 1e3:,.2f} ms exposed ({chosen.bound}-bound), "
                        f"activations {chosen.memory / 2**30:,.2f} GiB (H = "
                        f"{HEAD_WIDTH * heads:,}, causal, bf16, {system})")
    return bar_rows(items, lines)


LIVE = LiveFigure(
    controls={"sequence": Grid([4096, 16384, 65536, 262144], "sequence S", start=65536),
              "devices": Grid([4, 8, 16, 64], "devices N", start=8),
              "heads": Grid([8, 32, 64], "heads n_h", start=32),
              "scheme": Grid(list(SCHEMES), "scheme", start="ring")},
    rows=context_rows, chart=lambda base: words_and_bars(base, "ms per layer (forward)"))

# settings the benchmarks time: the defaults and the largest the widget offers
BENCHMARKS = [(render_context, dict(sequence=32768, devices=8, heads=32, scheme="ring")),
              (render_context, dict(sequence=2**19, devices=64, heads=128, scheme="ulysses",
                                    system="H100 cluster (NVLink + InfiniBand)"))]
