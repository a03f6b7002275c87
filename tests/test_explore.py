import pytest

import tpviz
from tpviz.errors import TpvizError
from tpviz.explore import STATIC_NOTE, render_layout


def test_live_widget_carries_a_static_figure_for_the_book():
    bundle = tpviz.explore_layout()._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "data:image/png;base64," in bundle["text/html"]
    assert STATIC_NOTE in bundle["text/html"]


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
