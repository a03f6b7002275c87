"""Figures of sharded arrays: blocks coloured and labelled by the devices that hold them.

``sharding`` draws a *planned* layout (shape, spec, mesh shape: no devices needed); ``array``
extracts the same information from a real ``jax.Array`` and draws it the same way.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from jax.sharding import PartitionSpec as P
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from tpviz import cost, layout
from tpviz.errors import ShardingError

# Okabe & Ito's colour-blind-safe palette; beyond 8 blocks, samples of cividis (also CVD-safe).
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7",
             "#999999")


def palette(n: int) -> list:
    """``n`` distinguishable colours, colour-blind safe."""
    if n <= len(OKABE_ITO):
        return list(OKABE_ITO[:n])
    return [plt.get_cmap("cividis")(v) for v in np.linspace(0.05, 0.95, n)]


def _text_colour(colour) -> str:
    r, g, b = plt.matplotlib.colors.to_rgb(colour)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _device_label(devices: Sequence[int]) -> str:
    if len(devices) <= 4:
        return "\n".join(f"D{d}" for d in devices)
    return f"D{devices[0]}, D{devices[1]}, …\n({len(devices)} devices)"


def blocks_figure(shape: Sequence[int], blocks: Sequence[tuple[tuple[slice, ...], Sequence[int]]],
                  title: str = "", ax=None, labels: bool = True) -> Figure:
    """Draw a 1D or 2D array as blocks; ``blocks`` is a list of (slices, device ids);
    ``labels=False`` leaves out the device names (faster for many blocks)."""
    shape = tuple(shape)
    if len(shape) not in (1, 2):
        raise ShardingError(
            f"can only draw 1D or 2D arrays, got shape {shape}; draw a 2D slice instead."
        )
    rows, cols = (1, shape[0]) if len(shape) == 1 else shape
    if ax is None:
        aspect = rows / cols
        w = 4.2 if aspect >= 1 else 5.2
        # a Figure outside pyplot: a notebook shows it once (as the cell's value), never twice
        fig = Figure(figsize=(w, max(1.4, min(4.2, w * aspect)) + 0.5), layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    colours = palette(len(blocks))
    for (slices, devices), colour in zip(blocks, colours, strict=True):
        rs, cs = (slice(0, 1), slices[0]) if len(shape) == 1 else slices
        ax.add_patch(plt.Rectangle((cs.start, rs.start), cs.stop - cs.start, rs.stop - rs.start,
                                   facecolor=colour, edgecolor="white", linewidth=2))
        size = 9 if len(blocks) <= 8 else 7
        if labels:
            ax.text((cs.start + cs.stop) / 2, (rs.start + rs.stop) / 2, _device_label(devices),
                    ha="center", va="center", fontsize=size, color=_text_colour(colour))
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_xticks([0, cols])
    ax.set_yticks([] if len(shape) == 1 else [0, rows])
    ax.set_aspect("auto")
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title, fontsize=10)
    return fig


def sharding(shape: Sequence[int], spec, mesh_shape: layout.MeshShape, *, name: str = "A",
             dtype=None, ax=None) -> Figure:
    """Draw the planned layout of an array: which mesh positions hold which block.

    Args:
        shape: the global shape (1D or 2D).
        spec: a ``PartitionSpec`` or a notation string such as ``"A[I_X, J_Y]"``.
        mesh_shape: axis name -> size, e.g. ``{"X": 2, "Y": 4}``; device ``Dk`` is the k-th
            position of the mesh in row-major order.
        name: the array's name in the title.
        dtype: when given, the title also states the bytes per device.
    """
    spec = layout.as_spec(spec)
    bs = layout.blocks(shape, spec, mesh_shape)
    title = layout.to_notation(spec, name=name, ndim=len(shape))
    mesh = " × ".join(f"{a}={s}" for a, s in mesh_shape.items())
    title += f" on mesh {mesh}"
    if dtype is not None:
        title += f"\n{layout.bytes_per_device(shape, dtype, spec, mesh_shape):,} bytes per device"
    return blocks_figure(shape, [(b.slices, b.devices) for b in bs], title, ax=ax)


def array(x, *, name: str = "A", ax=None) -> Figure:
    """Draw a real ``jax.Array``: its blocks and the ids of the devices that hold them."""
    held: dict[tuple, list[int]] = {}
    for device, index in x.sharding.devices_indices_map(x.shape).items():
        key = tuple((s.start or 0, x.shape[i] if s.stop is None else s.stop)
                    for i, s in enumerate(index))
        held.setdefault(key, []).append(device.id)
    blocks = [(tuple(slice(a, b) for a, b in key), sorted(ids))
              for key, ids in sorted(held.items())]
    spec = getattr(x.sharding, "spec", None)
    title = (layout.to_notation(spec, name=name, ndim=x.ndim) if spec is not None
             else f"{name} ({type(x.sharding).__name__})")
    per = x.addressable_shards[0].data.nbytes
    title += f": {x.dtype}{list(x.shape)}, {per:,} bytes per device"
    return blocks_figure(x.shape, blocks, title, ax=ax)


class Animation:
    """An animated GIF; shows itself as an ``<img>`` in notebooks and in the static book."""

    def __init__(self, gif: bytes, alt: str):
        self.gif, self.alt = gif, alt

    def _repr_html_(self) -> str:
        data = base64.b64encode(self.gif).decode()
        return f'<img src="data:image/gif;base64,{data}" alt="{self.alt}"/>'


def frame(canvas: FigureCanvasAgg) -> Image.Image:
    """The figure on ``canvas`` as an RGB image (draws it first)."""
    canvas.draw()
    return Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB")


def gif(images: Sequence[Image.Image], alt: str, ms_per_frame: int = 250) -> Animation:
    """An :class:`Animation` that shows ``images`` in turn, forever."""
    buf = io.BytesIO()
    images[0].save(buf, format="gif", save_all=True, append_images=list(images[1:]),
                   duration=ms_per_frame, loop=0)
    return Animation(buf.getvalue(), alt)


def _show_figures_in_notebooks() -> None:
    """Let a notebook show a returned Figure (ours live outside pyplot, so no backend shows them).

    Registers a PNG formatter for ``Figure`` only where the front end has none of its own.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    formatter = shell.display_formatter.formatters["image/png"]
    try:
        formatter.lookup_by_type(Figure)
    except KeyError:
        formatter.for_type(Figure, lambda fig: _png(fig))


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)  # layouts are fixed or constrained: no "tight" pass
    return buf.getvalue()



def matmul(p, *, system=None) -> Figure:
    """``X · W = Y`` side by side for a :class:`tpviz.matmul.MatmulPlan`: who holds which block
    of each operand, who computes which block of Y, and (below) what moves between devices."""
    fig = Figure(figsize=(10, 3.9))  # a fixed layout: constrained layout would double the time
    axes = fig.subplots(1, 3, width_ratios=[p.x_shape[1], p.w_shape[1], p.w_shape[1]],
                        gridspec_kw={"left": 0.05, "right": 0.98, "top": 0.68, "bottom": 0.1,
                                     "wspace": 0.25})
    arrays = [("X", ("B", "D"), p.x_shape, p.x_spec), ("W", ("D", "F"), p.w_shape, p.w_spec),
              ("Y", ("B", "F"), (p.x_shape[0], p.w_shape[1]), p.y_spec)]
    for ax, (name, dims, shape, spec) in zip(axes, arrays, strict=True):
        bs = layout.blocks(shape, spec, p.mesh_shape)
        blocks_figure(shape, [(b.slices, b.devices) for b in bs],
                      layout.to_notation(spec, name=name, dims=dims), ax=ax)
    moves = [f"{c.kind} of {c.what} over {'×'.join(c.axes)} ({c.group_size} devices): "
             f"{c.bytes:,} bytes per device" for c in p.collectives] or ["no communication"]
    lines = [p.describe(), *moves, f"{p.flops:,} FLOPs per device"]
    if system is not None:
        e = cost.estimate(p.flops, p.collectives, system)
        lines.append(f"{system.name}: compute {e.compute_s * 1e6:.2f} µs, communication "
                     f"{e.comm_s * 1e6:.2f} µs → {e.bound}-bound")
    fig.suptitle("\n".join(lines), fontsize=9, x=0.01, y=0.99, ha="left", va="top")
    return fig


_show_figures_in_notebooks()


def megatron_mlp(p, footer: str = "") -> Figure:
    """The Megatron MLP ``Z = gelu(X A) B`` for a :class:`tpviz.megatron.Plan`: who holds which
    block of X, A, the activations H, B, and the partial sums of Z before the all-reduce;
    ``footer``: more text below."""
    t, h, f, n = p.tokens, p.hidden, p.ffn, p.devices
    mesh = {"model": n}
    columns, rows, whole = P(None, "model"), P("model", None), P()
    arrays = [("X: all", (t, h), whole), ("A: columns", (h, f), columns),
              ("H = gelu(X A)", (t, f), columns), ("B: rows", (f, h), rows),
              ("Z: all-reduced", (t, h), whole)]
    height = 3.2 + 0.45 * bool(footer)
    fig = Figure(figsize=(10, height))
    widest = max(s[1] for _, s, _ in arrays)
    axes = fig.subplots(1, 5, width_ratios=[max(s[1], widest / 3) for _, s, _ in arrays],
                        gridspec_kw={"left": 0.04, "right": 0.98, "top": 1 - 0.9 / height,
                                     "bottom": (0.25 + 0.45 * bool(footer)) / height,
                                     "wspace": 0.5})
    if footer:
        fig.text(0.01, 0.01, footer, fontsize=9)
    for ax, (title, shape, spec) in zip(axes, arrays, strict=True):
        bs = layout.blocks(shape, spec, mesh)
        blocks_figure(shape, [(b.slices, b.devices) for b in bs], title, ax=ax,
                      labels=n <= 8 or len(bs) == 1)  # beyond 8, colour alone (text is slow)
    size = layout.dtype_size(p.dtype)
    fig.suptitle(
        f"{n} devices, {p.tokens:,} tokens, H = {h:,}, F = {f:,} ({p.dtype}): each device holds "
        f"A[{h:,}, {f // n:,}] and B[{f // n:,}, {h:,}] = {2 * h * f // n * size:,} bytes "
        f"(1/{n} of the MLP)\nforward: one all-reduce of Z, {p.all_reduce_bytes:,} bytes; "
        f"backward: one all-reduce of the gradient of X, {p.all_reduce_bytes:,} bytes",
        fontsize=9, x=0.01, y=0.99, ha="left", va="top")
    return fig


def megatron_timeline(kind: str = "mlp") -> Figure:
    """Where communication happens in a Megatron MLP (or block), forward and backward: compute
    in blue, the all-reduces of g (forward) and f (backward) in vermilion, identities in grey."""
    mlp_fwd = ["f: identity", "X·A (column)", "GeLU", "·B (row)", "g: all-reduce"]
    stages = {"mlp": mlp_fwd,
              "block": ["f: identity", "QKV (column)", "softmax·V", "·Wo (row)", "g: all-reduce",
                        *mlp_fwd]}[kind]
    backward = [s.replace("f: identity", "f: all-reduce").replace("g: all-reduce", "g: identity")
                for s in reversed(stages)]
    fig = Figure(figsize=(10, 1.9))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.09, right=0.99, top=0.82, bottom=0.05)
    for row, (label, seq) in enumerate([("forward", stages), ("backward", backward)]):
        for i, name in enumerate(seq):
            colour = (OKABE_ITO[5] if "all-reduce" in name else
                      "#cccccc" if "identity" in name else OKABE_ITO[4])
            ax.add_patch(plt.Rectangle((i, row + 0.1), 0.92, 0.8, facecolor=colour))
            ax.text(i + 0.46, row + 0.5, name, ha="center", va="center", fontsize=7,
                    color=_text_colour(colour))
        ax.text(-0.1, row + 0.5, label, ha="right", va="center", fontsize=9)
    ax.set_xlim(0, len(stages))
    ax.set_ylim(2, 0)
    ax.axis("off")
    count = stages.count("g: all-reduce")
    ax.set_title(f"{count} all-reduce{'s' * (count > 1)} forward (g), {count} backward (f)",
                 fontsize=9, loc="left")
    return fig
