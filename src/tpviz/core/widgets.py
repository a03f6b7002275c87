"""Widgets: a few controls that re-plan and redraw, shared by every topic's ``explore`` room.

Each ``explore_*`` returns a :class:`Live` object (built with :func:`live`). In Jupyter or
Colab it shows the live controls. In the static book (where no kernel runs) it shows the topic's
live figure (:mod:`tpviz.core.live`: precomputed from the plan layer, drawn in the browser with
working controls) where the topic declares one, else a figure of the default settings.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import HTML, Image, display
from matplotlib.figure import Figure

from tpviz import compat
from tpviz.core import figures, validate
from tpviz.errors import ArgumentError, ArgumentTypeError, TpvizError

STATIC_NOTE = ("Figure of the default settings. The controls are live when you run this notebook "
               "(Jupyter, Colab or Binder).")
LIVE_NOTE = ("Live figure: the controls work in this page (values precomputed from the library's "
             "plan). Run the notebook for every setting and the full drawing.")


def png(fig: Figure) -> bytes:
    """Render a figure to PNG bytes (and close it if pyplot manages it)."""
    data = figures.png(fig)
    plt.close(fig)
    return data


class Live:
    """A widget plus a static figure of its default state, chosen by the front end.

    The MIME bundle carries both: front ends that run widgets (Jupyter, Colab) show the widget;
    the book is configured to drop the widget view, and shows the figure (after ``html``, a table
    the figure goes with, if any) and a note instead.
    """

    def __init__(self, widget: widgets.Widget, static: bytes, note: str = STATIC_NOTE,
                 html: str = "", figure=None, starts: dict | None = None, name: str = ""):
        self.widget, self.static, self.note, self.html = widget, static, note, html
        self.figure, self.starts, self.name = figure, starts or {}, name
        self._live_html = None

    def live_html(self) -> str:
        """The static page's live figure (built once, on first display), or "" if none."""
        if self.figure is None:
            return ""
        if self._live_html is None:
            from tpviz.core import live as live_figures

            self._live_html = live_figures.embed(live_figures.starting(self.figure, self.starts),
                                                 self.name)
        return self._live_html

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = compat.widget_bundle(self.widget)  # ipywidgets 7 and 8
        shown = self.live_html()
        if shown:
            bundle["text/html"] = (f"<figure>{shown}<figcaption><em>{LIVE_NOTE}</em>"
                                   "</figcaption></figure>")
            bundle["text/plain"] = LIVE_NOTE
            return bundle
        data = base64.b64encode(self.static).decode()
        bundle["text/html"] = (f'{self.html}<figure><img src="data:image/png;base64,{data}" '
                               f'alt="{self.note}"/><figcaption><em>{self.note}</em>'
                               "</figcaption></figure>")
        bundle["text/plain"] = self.note
        return bundle


Rendered = Figure | str | tuple[str, Figure]


def live(controls: dict[str, widgets.ValueWidget], render: Callable[..., Rendered],
         figure=None) -> Live:
    """Wire ``controls`` to ``render(**values)``: a figure, ``(html, figure)`` (a table shown
    above the figure: HTML costs the redraw nothing), or a message for bad settings.
    ``figure``: the topic's :class:`tpviz.core.live.LiveFigure`, which the static book shows
    instead of the PNG (starting from the controls' values where its grids hold them)."""
    out = widgets.Output()

    def show(result: Rendered) -> None:
        if isinstance(result, tuple):
            display(HTML(result[0]))
            result = result[1]
        if isinstance(result, Figure):
            display(result)
            plt.close(result)
        else:
            print(result)

    def redraw(_=None):
        values = {k: w.value for k, w in controls.items()}
        with out:
            out.clear_output(wait=True)
            try:
                result = render(**values)
            except TpvizError as e:  # bad settings: say why, keep the controls alive
                result = f"⚠ {e}"
            show(result)

    for w in controls.values():
        w.observe(redraw, names="value")
    first = render(**{k: w.value for k, w in controls.items()})
    html, fig = first if isinstance(first, tuple) else ("", first)
    static = png(fig)
    with out:
        if html:
            display(HTML(html))
        display(Image(static))
    rows = [list(controls.values())[i:i + 3] for i in range(0, len(controls), 3)]
    box = widgets.VBox([*(widgets.HBox(r) for r in rows), out])
    starts = {k: w.value for k, w in controls.items()}
    return Live(box, static, html=html, figure=figure, starts=starts,
                name=getattr(render, "__name__", "figure"))


STYLE = {"description_width": "initial"}


# --- controls that check the value they start with ----------------------------------------------

class Controls:
    """Controls of one explorer, each starting at the explorer's argument: a value the control
    cannot show is refused (never clamped silently), naming the explorer and the argument.

    Example: ``c = Controls("explore_zero"); c.int_slider("stage", stage, 0, 3, "ZeRO stage")``.
    """

    def __init__(self, where: str):
        self.where = where

    def _refuse(self, name: str, value, allowed: str) -> ArgumentError:
        return ArgumentError(f"{self.where}({name}={value!r}): {allowed}.")

    def _choice(self, name: str, value, options: list):
        try:
            return validate.choice(name, value, options)
        except ArgumentError as e:
            raise ArgumentError(f"{self.where}: {e}") from None

    def dropdown(self, name: str, value, options, description: str) -> widgets.Dropdown:
        """A drop-down list starting at ``value``, which must be one of ``options``."""
        options = list(options)
        return widgets.Dropdown(options=options, value=self._choice(name, value, options),
                                description=description, style=STYLE)

    def select_slider(self, name: str, value, options, description: str
                      ) -> widgets.SelectionSlider:
        """A slider over the values ``options``, starting at ``value`` (one of them)."""
        options = list(options)
        return widgets.SelectionSlider(options=options, value=self._choice(name, value, options),
                                       description=description, style=STYLE)

    def int_slider(self, name: str, value, lo: int, hi: int, description: str
                   ) -> widgets.IntSlider:
        """An integer slider over ``lo…hi`` starting at ``value``."""
        value = validate.integer(f"{self.where}: {name}", value, minimum=None)
        if not lo <= value <= hi:
            raise self._refuse(name, value, f"choose a value from {lo} to {hi}")
        return widgets.IntSlider(value=value, min=lo, max=hi, description=description,
                                 style=STYLE)

    def float_slider(self, name: str, value, lo: float, hi: float, step: float,
                     description: str) -> widgets.FloatSlider:
        """A slider of numbers over ``lo…hi`` in steps of ``step``, starting at ``value``."""
        value = validate.number(f"{self.where}: {name}", value)
        if not lo <= value <= hi:
            raise self._refuse(name, value, f"choose a value from {lo:g} to {hi:g}")
        return widgets.FloatSlider(value=value, min=lo, max=hi, step=step,
                                   description=description, style=STYLE)

    def number_box(self, name: str, value, lo: float, hi: float, description: str
                   ) -> widgets.BoundedFloatText:
        """A box for a number in ``lo…hi``, starting at ``value``."""
        value = validate.number(f"{self.where}: {name}", value)
        if not lo <= value <= hi:
            raise self._refuse(name, value, f"choose a value from {lo:g} to {hi:g}")
        return widgets.BoundedFloatText(value=value, min=lo, max=hi, description=description,
                                        style=STYLE)

    def text_box(self, name: str, value, description: str) -> widgets.Text:
        """A text box (read when Enter is pressed), starting at ``value``."""
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{self.where}({name}={value!r}): expected a string.")
        return widgets.Text(value=value, description=description, continuous_update=False,
                            style=STYLE)

    def checkbox(self, name: str, value, description: str) -> widgets.Checkbox:
        """A check box, ticked when ``value`` is True."""
        if not isinstance(value, bool):
            raise ArgumentTypeError(f"{self.where}({name}={value!r}): expected True or False.")
        return widgets.Checkbox(value=value, description=description)
