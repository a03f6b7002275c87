"""Widgets: a few controls that re-plan and redraw.

Each ``explore_*`` returns a :class:`Live` object. In Jupyter or Colab it shows the live controls;
in the static book (where no kernel runs) it shows a figure of the default settings and says that
the controls are live when the notebook runs.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import Image, display
from matplotlib.figure import Figure

from tpviz import draw, layout
from tpviz.errors import TpvizError

STATIC_NOTE = ("Figure of the default settings. The controls are live when you run this notebook "
               "(Jupyter, Colab or Binder).")


def png(fig: Figure) -> bytes:
    """Render a figure to PNG bytes (and close it if pyplot manages it)."""
    data = draw._png(fig)
    plt.close(fig)
    return data


class Live:
    """A widget plus a static figure of its default state, chosen by the front end.

    The MIME bundle carries both: front ends that run widgets (Jupyter, Colab) show the widget;
    the book is configured to drop the widget view, and shows the figure and a note instead.
    """

    def __init__(self, widget: widgets.Widget, static: bytes, note: str = STATIC_NOTE):
        self.widget, self.static, self.note = widget, static, note

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.widget._repr_mimebundle_()
        data = base64.b64encode(self.static).decode()
        bundle["text/html"] = (f'<figure><img src="data:image/png;base64,{data}" '
                               f'alt="{self.note}"/><figcaption><em>{self.note}</em>'
                               "</figcaption></figure>")
        bundle["text/plain"] = self.note
        return bundle


def live(controls: dict[str, widgets.ValueWidget], render: Callable[..., Figure | str]) -> Live:
    """Wire ``controls`` to ``render(**values)`` (a figure, or a message for bad settings)."""
    out = widgets.Output()

    def redraw(_=None):
        values = {k: w.value for k, w in controls.items()}
        with out:
            out.clear_output(wait=True)
            try:
                result = render(**values)
            except TpvizError as e:  # bad settings: say why, keep the controls alive
                result = f"⚠ {e}"
            if isinstance(result, Figure):
                display(result)
                plt.close(result)
            else:
                print(result)

    for w in controls.values():
        w.observe(redraw, names="value")
    static = png(render(**{k: w.value for k, w in controls.items()}))
    with out:
        display(Image(static))
    box = widgets.VBox([widgets.HBox(list(controls.values())[:3]),
                        widgets.HBox(list(controls.values())[3:]), out])
    return Live(box, static)


MESHES = {"X=8": {"X": 8}, "X=2, Y=4": {"X": 2, "Y": 4}, "X=4, Y=2": {"X": 4, "Y": 2},
          "X=2, Y=2, Z=2": {"X": 2, "Y": 2, "Z": 2}}


def render_layout(mesh: str, notation: str, rows: int, cols: int, dtype: str) -> Figure:
    """The figure ``explore_layout`` shows for one setting (also used by the benchmarks)."""
    parsed = layout.parse(notation)
    return draw.sharding((rows, cols), parsed.spec, MESHES[mesh], name=parsed.name, dtype=dtype)


def explore_layout(mesh: str = "X=2, Y=4", notation: str = "A[I_X, J_Y]", rows: int = 8,
                   cols: int = 16, dtype: str = "float32") -> Live:
    """Mesh shape and sharding notation → the layout drawing and the bytes each device holds."""
    style = {"description_width": "initial"}
    controls = {
        "mesh": widgets.Dropdown(options=list(MESHES), value=mesh, description="mesh", style=style),
        "notation": widgets.Text(value=notation, description="sharding", continuous_update=False,
                                 style=style),
        "dtype": widgets.Dropdown(options=["float32", "bf16", "int8"], value=dtype,
                                  description="dtype", style=style),
        "rows": widgets.IntSlider(value=rows, min=1, max=32, description="rows", style=style),
        "cols": widgets.IntSlider(value=cols, min=1, max=32, description="columns", style=style),
    }
    return live(controls, render_layout)
