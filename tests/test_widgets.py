import base64
import json

import pytest

import tpviz
from tpviz.core.live import LiveFigure, book_html
from tpviz.core.widgets import LIVE_MIME, LIVE_NOTE, STATIC_NOTE, Refusal, live
from tpviz.errors import ArgumentError, TpvizError
from tpviz.layouts.explore import render_layout
from tpviz.pipeline.explore import render_pipeline


def test_live_widget_names_its_live_figure_for_the_book_and_carries_no_html_of_it():
    bundle = tpviz.explore_layout()._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    # the figure of the first setting, for front ends without the widget's model
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")
    assert bundle[LIVE_MIME] == {"figure": "tpviz.layouts.explore:LIVE", "name": "render_layout",
                                 "starts": {"mesh": "X=2, Y=4", "notation": "A[I_X, J_Y]",
                                            "dtype": "float32", "rows": 8, "cols": 16}}
    assert "tpviz-live" not in json.dumps(bundle)  # the book's figure is not in the notebook
    # the book's build draws it from that payload
    book = book_html(bundle[LIVE_MIME])
    assert '<div class="tpviz-live" data-name="render_layout">' in book and LIVE_NOTE in book


def test_showing_an_explorer_builds_no_live_figure(monkeypatch):
    """The book's live figure costs the kernel nothing (explore_network took 2.1 s for it)."""
    from tpviz.core import live as core_live

    def refuse(*args, **kwargs):
        raise AssertionError("the kernel built the book's live figure")

    monkeypatch.setattr(core_live, "spec", refuse)
    monkeypatch.setattr(core_live, "embed", refuse)
    for explore in (tpviz.explore_network, tpviz.explore_roofline, tpviz.explore_pipeline):
        bundle = explore()._repr_mimebundle_()
        figure = bundle.get("image/png") or bundle["text/html"]  # (the latter with its table)
        assert len(json.dumps(bundle)) < len(figure) + 1000


def test_book_html_draws_only_the_librarys_live_figures():
    with pytest.raises(ArgumentError, match="not 'tpviz"):
        book_html({"figure": "os:system"})
    with pytest.raises(ArgumentError, match="not a LiveFigure"):
        book_html({"figure": "tpviz.layouts.explore:render_layout"})


def test_a_live_figure_must_be_importable_by_the_build():
    from ipywidgets import IntSlider

    from tpviz.layouts.explore import LIVE

    local = LiveFigure(LIVE.controls, LIVE.rows, LIVE.chart)  # not a top-level name
    with pytest.raises(ArgumentError, match="top-level name"):
        live({"rows": IntSlider(value=8, min=1, max=32)}, render_layout, figure=local)


def test_widget_without_a_live_figure_carries_its_png():
    from ipywidgets import IntSlider

    bundle = live({"rows": IntSlider(value=8, min=1, max=32)},
                  lambda rows: render_layout("X=8", "A[I_X, J]", rows, 8, "bf16")
                  )._repr_mimebundle_()
    assert "data:image/png;base64," in bundle["text/html"]
    assert STATIC_NOTE in bundle["text/html"] and LIVE_MIME not in bundle


def test_render_matches_the_plan():
    fig = render_layout("X=2, Y=2, Z=2", "A[I_XY, J_Z]", 8, 8, "bf16")
    assert "16 bytes per device" in fig.axes[0].get_title()  # a [2, 4] block of 2-byte elements


@pytest.mark.parametrize("notation", ["A[I_Q, J]", "A[I_X, J_X]", "A((", "A[I_XYZ, J]"])
def test_bad_settings_raise_library_errors_the_widget_can_show(notation):
    with pytest.raises(TpvizError):
        render_layout("X=2, Y=4", notation, 8, 16, "float32")


def test_widget_survives_bad_input(capsys):
    live = tpviz.explore_layout()
    text = live.widget.children[0].children[1]
    capsys.readouterr()
    text.value = "A[I_Q, J]"  # unknown axis: a message in the output, not an exception
    assert "unknown mesh axis 'Q'" in capsys.readouterr().out  # (outside a kernel, Output prints)


def test_a_refused_setting_reads_as_a_paragraph_that_wraps_between_words():
    bundle = Refusal("explore_x(stages=17): choose a value from 1 to 16.")._repr_mimebundle_()
    assert bundle["text/html"] == ('<p class="tpviz-refused">⚠ explore_x(stages=17): choose a '
                                   'value from 1 to 16.</p>')  # not a <pre> of printed text
    assert bundle["text/plain"].startswith("⚠ explore_x")
    assert "&lt;b&gt;" in Refusal("<b>")._repr_mimebundle_()["text/html"]


def test_pipeline_widget_shows_the_simulation_beside_the_formula():
    fig = render_pipeline("gpipe", 4, 12, 2, 2.0)
    footer = fig.texts[-1].get_text()
    bubble = 3 / 15  # (p-1)/(m+p-1)
    assert f"simulated {bubble:.2%}, formula (p−1)/(m+p−1) = {bubble:.2%}" in footer
    assert "first device 12, last 12" in footer  # GPipe holds all m microbatches


def test_pipeline_widget_explains_an_impossible_interleaving(capsys):
    live = tpviz.explore_pipeline(name="interleaved", stages=4, microbatches=8)
    capsys.readouterr()
    live.widget.children[0].children[2].value = 6  # microbatches: 6 is not a multiple of 4
    assert "must be a multiple of 4" in capsys.readouterr().out


def test_zero_widget_says_whether_it_fits():
    from tpviz.zero.explore import PRECISIONS, render_zero

    mixed = next(iter(PRECISIONS))
    # 7.5B on 64 devices, stage 2: 2Ψ + 14Ψ/64 = 16.6 GB <= 80 GB
    title = render_zero("7.5B (ZeRO paper)", 1, 64, 2, mixed, 80).axes[0].get_title(loc="left")
    assert "stage 2: 16.6 GB per device → fits; stage 2 needs at least 2 devices" in title
    title = render_zero("custom", 13, 8, 0, mixed, 40).axes[0].get_title(loc="left")
    assert "208.0 GB per device → does not fit; stage 0 never fits" in title


@pytest.mark.slow
def test_mesh2d_widget_shows_the_table_and_the_best_mesh(capsys):
    from tpviz.mesh2d.explore import render_mesh2d

    gpu = "H100 cluster (NVLink + InfiniBand)"
    html, fig = render_mesh2d(64, 16, 262144, 8192, 4, gpu, "bf16")
    assert "all-gather W₁ along data" in html and "4 devices" in html  # data=16 × model=4
    # fewest bytes is 16 × 4, but on GPUs the model axis of 8 fills an NVLink node: 8 × 8 wins
    assert "least communication: data=8 × model=8" in fig.texts[-1].get_text()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["data parallel", "1D Megatron", "2D 8×8", "2D 16×4"]
    live = tpviz.explore_mesh2d()
    # the static book shows the live figure (its words give the step time), not a stale table
    assert 'data-name="render_mesh2d"' in book_html(live._repr_mimebundle_()[LIVE_MIME])
    capsys.readouterr()
    live.widget.children[0].children[1].value = 16  # data = 16 > 8 devices
    assert "does not divide 8 devices" in capsys.readouterr().out
