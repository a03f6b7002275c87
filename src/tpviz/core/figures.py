"""What every figure shares: the palette, arrays drawn as blocks, PNG and animated GIF.

Figures are ``matplotlib.figure.Figure`` objects outside pyplot (a notebook shows a returned
figure once, as the cell's value). The topics draw their plans with these pieces.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from tpviz.core.kinds import Axes, Colour, Inches, Indices, KeywordsOf, Size
from tpviz.errors import ShardingError

#: the book's text column is 656-672 px wide at a 1280-px window: a figure this many inches
#: wide at DPI dots per inch is shown at >= 0.96 of its size, so text of SMALL_PT points or
#: more reads at >= 9 pt. Every figure is drawn at most this wide (:func:`figure`).
COLUMN_IN = 6.8
DPI = 100
#: the smallest text of any figure (tick labels, block labels, legends), and titles
SMALL_PT = 9
TITLE_PT = 10


def figure(height: Inches, width: Inches = COLUMN_IN, **kwargs: KeywordsOf(Figure)) -> Figure:
    """A matplotlib Figure (outside pyplot) at most the column's width, at :data:`DPI`."""
    return Figure(figsize=(min(width, COLUMN_IN), height), dpi=DPI, **kwargs)


# Okabe & Ito's colour-blind-safe palette; beyond 8 blocks, samples of cividis (also CVD-safe).
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7",
             "#999999")


def palette(n: Size(4096, "more colours than that cannot be told apart")) -> list:
    """``n`` distinguishable colours, colour-blind safe."""
    if n <= len(OKABE_ITO):
        return list(OKABE_ITO[:n])
    return [tuple(c) for c in plt.get_cmap("cividis")(np.linspace(0.05, 0.95, n)).tolist()]


def luminance(colour: Colour) -> float:
    """WCAG 2 relative luminance of a colour (0 black, 1 white)."""
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
           for c in plt.matplotlib.colors.to_rgb(colour)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: Colour, b: Colour) -> float:
    """WCAG 2 contrast ratio of two colours, 1 to 21 (text wants >= 4.5, marks >= 3)."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def text_colour(colour: Colour) -> str:
    """Black or white, whichever contrasts more with ``colour`` (always >= 4.58:1)."""
    return "black" if contrast(colour, "black") >= contrast(colour, "white") else "white"


def device_label(devices: Indices) -> str:
    if len(devices) <= 4:
        return "\n".join(f"D{d}" for d in devices)
    return f"D{devices[0]}, D{devices[1]}, …\n({len(devices)} devices)"


def blocks_figure(shape: Sequence[int], blocks: Sequence[tuple[tuple[slice, ...], Sequence[int]]],
                  title: str = "", ax: Axes | None = None, labels: bool = True) -> Figure:
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
        fig = figure(max(1.4, min(4.2, w * aspect)) + 0.5, w, layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    colours = palette(len(blocks))
    for (slices, devices), colour in zip(blocks, colours, strict=True):
        rs, cs = (slice(0, 1), slices[0]) if len(shape) == 1 else slices
        ax.add_patch(plt.Rectangle((cs.start, rs.start), cs.stop - cs.start, rs.stop - rs.start,
                                   facecolor=colour, edgecolor="white", linewidth=2))
        if labels and len(blocks) <= 16:  # more would not fit at a legible size
            ax.text((cs.start + cs.stop) / 2, (rs.start + rs.stop) / 2, device_label(devices),
                    ha="center", va="center", fontsize=SMALL_PT, color=text_colour(colour))
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_xticks([0, cols])
    ax.set_yticks([] if len(shape) == 1 else [0, rows])
    ax.set_aspect("auto")
    for side in ax.spines.values():
        side.set_visible(False)
    ax.tick_params(labelsize=SMALL_PT)
    ax.set_title(title, fontsize=TITLE_PT)
    return fig


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


def gif(images: Sequence[Image.Image], alt: str,
        ms_per_frame: Size(60_000, "a minute a frame") = 250) -> Animation:
    """An :class:`Animation` that shows ``images`` in turn, forever."""
    # one palette for every frame, from all of them (quantized as one tall image): a frame
    # then stores only the pixels that change, a fraction of a palette per frame's bytes
    width, height = images[0].size
    strip = Image.new("RGB", (width, height * len(images)))
    for i, im in enumerate(images):
        strip.paste(im, (0, i * height))
    shared = quantized(strip)
    frames = [shared.crop((0, i * height, width, (i + 1) * height)) for i in range(len(images))]
    buf = io.BytesIO()
    frames[0].save(buf, format="gif", save_all=True, append_images=frames[1:],
                   duration=ms_per_frame, loop=0, optimize=True)
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
        formatter.for_type(Figure, png)


#: colours kept in a saved figure: a figure's few colours plus their anti-aliased edges fit in
#: 256 (each pixel moves by 0-1 of 255 on average), and an 8-bit PNG is a third the size
COLOURS = 256


def quantized(image: Image.Image) -> Image.Image:
    """An RGB image in :data:`COLOURS` colours (median cut, no dithering), each colour set to the
    commonest one it stands for: a figure's flat areas (its background, its blocks) keep their
    exact colour, where median cut alone gives them the mean of their neighbours'."""
    out = image.quantize(COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    # one 32-bit key a pixel, its palette entry above its colour (a 10-Mpixel animation strip
    # in 40 MB a copy: 64-bit keys and colours took 600 MB and failed under a 1 GiB cap)
    rgb = np.asarray(image, np.uint8).reshape(-1, 3)
    key = np.asarray(out, np.uint32).reshape(-1) << 24
    for shift, channel in ((16, 0), (8, 1), (0, 2)):
        key |= rgb[:, channel].astype(np.uint32) << shift
    keys, counts = np.unique(key, return_counts=True)
    keys = keys[np.argsort(counts, kind="stable")][::-1]  # commonest first
    entries, first = np.unique(keys >> 24, return_index=True)
    colours = keys[first] & 0xFFFFFF
    palette = np.asarray(out.getpalette(), np.uint8).reshape(-1, 3).copy()
    palette[entries.astype(int)] = np.stack([colours >> 16, colours >> 8 & 255, colours & 255], 1)
    out.putpalette(palette.reshape(-1).tolist())
    return out


def _agg_size(size_px: np.ndarray, count: int) -> tuple[int, int]:
    """The whole-pixel (width, height) within a pixel of ``size_px`` that has ``count`` pixels
    ((0, 0) where none has)."""
    for width in sorted({int(np.floor(size_px[0])), int(np.ceil(size_px[0])), round(size_px[0])}):
        height, rest = divmod(count, max(width, 1))
        if not rest and abs(height - size_px[1]) < 1:
            return width, height
    return 0, 0


def png(fig: Figure) -> bytes:
    """The figure as an 8-bit PNG at 100 dpi (a full-colour one where it has see-through parts).

    Saved notebooks hold every figure (issue 40: under 1 MB a chapter), and a figure of
    :data:`COLOURS` colours, chosen by median cut without dithering, looks the same.
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="rgba", dpi=100)  # layouts are fixed or constrained: no "tight" pass
    # Agg draws whole pixels, and matplotlib versions round differently (4.6 in at 100 dpi is
    # 459.99999999999994 px: 3.10 draws 459 rows, 3.11 460): read the size from the buffer
    pixels = np.frombuffer(buf.getbuffer(), np.uint8)
    width, height = _agg_size(fig.get_size_inches() * 100, pixels.size // 4)
    out = io.BytesIO()
    if width * height * 4 != pixels.size:  # not Agg's size (never seen): matplotlib's own PNG
        fig.savefig(out, format="png", dpi=100)
        return out.getvalue()
    pixels = pixels.reshape(height, width, 4)
    if (pixels[..., 3] == 255).all():
        image = quantized(Image.fromarray(pixels[..., :3]))
    else:
        image = Image.fromarray(pixels)
    image.save(out, format="png")
    return out.getvalue()



_show_figures_in_notebooks()
