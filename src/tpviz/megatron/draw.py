"""Drawings of Megatron tensor parallelism: the sharded MLP, and where it communicates."""

from __future__ import annotations

import matplotlib.pyplot as plt
from jax.sharding import PartitionSpec as P
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from tpviz.core import layout
from tpviz.core.figures import OKABE_ITO, SMALL_PT, device_label, palette, text_colour
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import OneOf
from tpviz.megatron.plan import KINDS, Plan


def mlp(p: Plan, footer: str = "") -> Figure:
    """The Megatron MLP ``Out = gelu(In W1) W2`` for a :class:`tpviz.megatron.Plan`: who holds
    which block of In, W1, the activations Tmp, W2, and of Out after the all-reduce;
    ``footer``: more text below.

    The five arrays are panels of one Axes, their blocks one collection (an Axes per array, a
    patch per block and tick labels took most of the redraw: 90 → 35 ms at 16 devices)."""
    t, h, f, n = p.tokens, p.hidden, p.ffn, p.devices
    mesh = {"model": n}
    columns, rows, whole = P(None, "model"), P("model", None), P()
    arrays = [("In: all", (t, h), whole), ("W1: columns", (h, f), columns),
              ("Tmp = gelu(In W1)", (t, f), columns), ("W2: rows", (f, h), rows),
              ("Out: all-reduced", (t, h), whole)]
    lines = footer.count("\n") + 1 if footer else 0
    below = 0.25 + 0.15 * lines  # inches under the arrays: the footer's lines
    height = 3.35 + below
    fig = column_figure(height)
    widest = max(s[1] for _, s, _ in arrays)
    # a narrow array's panel is at least half the widest: its title, up to 13 digits wide,
    # then stays clear of its neighbours' and of the image's edge (at F = 8H, a third was not)
    widths = [max(s[1], widest / 2) / widest for _, s, _ in arrays]
    gap = 0.35 * sum(widths) / len(widths)  # matplotlib's wspace: a fraction of the mean width
    ax = fig.add_axes((0.045, below / height, 0.935, 1 - (1.45 + below) / height))
    # pixels per unit of panel width, and per array height: a device's name is written in its
    # block only where it fits (about 7 px a character, 13 px a line at SMALL_PT)
    px_wide = 0.935 * fig.get_figwidth() * fig.dpi / (sum(widths) + gap * (len(widths) - 1))
    px_high = (fig.get_figheight() - 1.45 - below) * fig.dpi
    if footer:
        fig.text(0.01, 0.01, footer, fontsize=SMALL_PT)
    boxes, faces, x0 = [], [], 0.0
    for (title, shape, spec), w in zip(arrays, widths, strict=True):
        bs = layout.blocks(shape, spec, mesh)
        colours = palette(len(bs))
        labels = (n <= 8 or len(bs) == 1) and len(bs) <= 16  # beyond 8, colour alone
        for b, colour in zip(bs, colours, strict=True):
            rs, cs = b.slices
            left, right = x0 + w * cs.start / shape[1], x0 + w * cs.stop / shape[1]
            top, bottom = rs.start / shape[0], rs.stop / shape[0]
            boxes.append(((left, top), (right, top), (right, bottom), (left, bottom)))
            faces.append(colour)
            name = device_label(b.devices).split("\n")
            fits = ((right - left) * px_wide >= 7 * max(map(len, name)) + 4
                    and (bottom - top) * px_high >= 13 * len(name) + 2)
            if labels and fits:
                ax.text((left + right) / 2, (top + bottom) / 2, device_label(b.devices),
                        ha="center", va="center", fontsize=SMALL_PT, color=text_colour(colour))
        ax.text(x0 + w / 2, -0.03, title.replace(": ", ":\n").replace(" = ", "\n= ")
                + f"\n{shape[0]:,}×{shape[1]:,}", ha="center", va="bottom", fontsize=SMALL_PT)
        x0 += w + gap
    ax.add_collection(PolyCollection(boxes, facecolors=faces, edgecolors="white",
                                     linewidths=2))
    ax.set_xlim(0, x0 - gap)
    ax.set_ylim(1, 0)
    ax.axis("off")
    size = layout.dtype_size(p.dtype)
    fig.suptitle(
        f"{n} devices, {p.tokens:,} tokens, H = {h:,}, F = {f:,} ({p.dtype}): each device holds "
        f"W1[{h:,}, {f // n:,}]\nand W2[{f // n:,}, {h:,}] = {2 * h * f // n * size:,} bytes "
        f"(1/{n} of the MLP)\nforward: one all-reduce of Out, {p.all_reduce_bytes:,} bytes;\n"
        f"backward: one all-reduce of the gradient of In, {p.all_reduce_bytes:,} bytes",
        fontsize=SMALL_PT, x=0.01, y=0.99, ha="left", va="top")
    return fig


def timeline(kind: OneOf(KINDS) = "mlp") -> Figure:
    """Where communication happens in a Megatron MLP (or block), forward and backward: compute
    in blue, the all-reduces of g (forward) and f (backward) in vermilion, identities in grey."""
    mlp_fwd = ["f: identity", "In·W1 (column)", "GeLU", "·W2 (row)", "g: all-reduce"]
    stages = {"mlp": mlp_fwd,
              "block": ["f: identity", "QKV (column)", "softmax·V", "·Wo (row)", "g: all-reduce",
                        *mlp_fwd]}[kind]
    backward = [s.replace("f: identity", "f: all-reduce").replace("g: all-reduce", "g: identity")
                for s in reversed(stages)]
    fig = column_figure(2.3 if len(stages) <= 5 else 3.2)
    ax = fig.subplots()
    fig.subplots_adjust(left=0.005, right=0.995, top=0.84, bottom=0.02)
    for row, (label, seq) in enumerate([("forward", stages), ("backward", backward)]):
        for i, name in enumerate(seq):
            colour = (OKABE_ITO[5] if "all-reduce" in name else
                      "#cccccc" if "identity" in name else OKABE_ITO[4])
            ax.add_patch(plt.Rectangle((i, row + 0.1), 0.92, 0.8, facecolor=colour))
            words = (name if len(stages) <= 5 else name.replace(": ", ":\n").replace(
                " (", "\n(").replace("all-reduce", "all-\nreduce").replace("max·", "max·\n"))
            ax.text(i + 0.46, row + 0.5, words, ha="center", va="center", fontsize=SMALL_PT,
                    color=text_colour(colour))
        ax.text(0, row + 0.08, label, ha="left", va="bottom", fontsize=SMALL_PT)
    ax.set_xlim(0, len(stages))
    ax.set_ylim(2, -0.08)
    ax.axis("off")
    count = stages.count("g: all-reduce")
    ax.set_title(f"{count} all-reduce{'s' * (count > 1)} forward (g), {count} backward (f)",
                 fontsize=SMALL_PT, loc="left")
    return fig
