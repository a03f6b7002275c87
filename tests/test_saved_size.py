"""A run and saved chapter stays small (issue 40: under 1 MB): figures are 8-bit PNGs and
animations share one palette, both looking as drawn; `make test` fails a chapter that saves
larger (tools/saved_size.py, called by conftest.py's --chapters-into-cache)."""

import io
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

from tpviz.core import figures

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import saved_size


def _busy_figure(alpha_face: float = 1.0, height: float = 4.6):
    """Like chapter 8's loss curves: noisy lines over overlapping see-through bands."""
    fig = figures.figure(height)
    fig.patch.set_alpha(alpha_face)
    ax = fig.subplots()
    rng = np.random.default_rng(0)
    x = np.arange(300)
    for i, colour in enumerate(figures.OKABE_ITO):
        y = np.exp(-x / (60 + 20 * i)) + 0.05 * rng.standard_normal((5, 300)).cumsum(1) / 10
        ax.fill_between(x, y.min(0), y.max(0), color=colour, alpha=0.25)
        ax.plot(x, np.median(y, 0), color=colour, label=f"run {i}")
    ax.legend()
    return fig


def _full_colour(fig) -> np.ndarray:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return np.asarray(Image.open(buf).convert("RGBA")), len(buf.getvalue())


# 4.6 in is 459.99999999999994 px, which Agg draws as 460 rows in matplotlib 3.11 and 459 in
# Colab's 3.10; 4.555 in, 455.5 px, as 455
@pytest.mark.parametrize("height", [4.6, 4.555, 3.1, 2.0])
def test_a_figure_is_an_8_bit_png_that_looks_as_drawn_at_a_third_the_bytes(height):
    fig = _busy_figure(height=height)
    drawn, full_bytes = _full_colour(fig)
    data = figures.png(fig)
    image = Image.open(io.BytesIO(data))
    assert image.mode == "P" and image.size == (drawn.shape[1], drawn.shape[0])
    error = np.abs(np.asarray(image.convert("RGB"), int) - drawn[..., :3].astype(int)).max(-1)
    # each pixel moves by about 1 of 255 on average; the few worst are anti-aliased edges (the
    # 99th percentile measured 14-18 of 255 over heights 2-5.3 in, matplotlib 3.10 and 3.11)
    assert error.mean() < 1.5 and np.percentile(error, 99) <= 24
    assert (error > 32).mean() < 0.01
    assert len(data) < full_bytes / 2.5


def test_a_see_through_figure_keeps_every_colour_and_its_transparency():
    fig = _busy_figure(alpha_face=0.0)
    drawn, _ = _full_colour(fig)
    image = Image.open(io.BytesIO(figures.png(fig)))
    assert image.mode == "RGBA"
    assert np.array_equal(np.asarray(image), drawn)


def test_an_animation_shares_one_palette_and_shows_each_frame_as_drawn():
    fig = _busy_figure()
    canvas = figures.FigureCanvasAgg(fig)
    curtain = fig.axes[0].axvspan(0, 300, color="white", zorder=5)
    frames = []
    for now in np.linspace(0, 300, 8):
        curtain.set_x(now)
        frames.append(figures.frame(canvas))
    shown = Image.open(io.BytesIO(figures.gif(frames, "test").gif))
    assert shown.n_frames == len(frames)
    for i, drawn in enumerate(frames):
        shown.seek(i)
        error = np.abs(np.asarray(shown.convert("RGB"), int) - np.asarray(drawn, int)).max(-1)
        assert error.mean() < 1.5 and np.percentile(error, 99) <= 16
    # Pillow's default, a palette per frame, stores every frame whole: at least twice the bytes
    separate = io.BytesIO()
    frames[0].save(separate, format="gif", save_all=True, append_images=frames[1:], loop=0)
    assert len(figures.gif(frames, "test").gif) < len(separate.getvalue()) / 2


def _notebook(text_bytes: int) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print('a' * n)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a" * text_bytes)]
    nb.cells = [nbformat.v4.new_code_cell("n = 1"), cell]
    return nb


def test_the_saved_size_is_the_file_jupyterlab_writes(tmp_path):
    nb = _notebook(50_000)
    nbformat.write(nb, tmp_path / "nb.ipynb")
    size = saved_size.saved_bytes(nb)
    assert size == (tmp_path / "nb.ipynb").stat().st_size
    assert 50_000 < size < 51_000


def test_a_chapter_over_the_limit_fails_naming_its_largest_output():
    assert saved_size.too_large(_notebook(800_000), "small.ipynb") is None
    message = saved_size.too_large(_notebook(950_000), "big.ipynb")
    assert message is not None and "big.ipynb" in message and "at most 900,000" in message
    first = message.splitlines()[1]
    assert "cell 1: stdout" in first and "950,002 B" in first  # the text and its JSON quotes
