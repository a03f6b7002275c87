"""Widgets: a few controls that re-plan and redraw, shared by every topic's ``explore`` room.

Each ``explore_*`` returns a :class:`Live` object (built with :func:`live`). Its MIME bundle
holds, beside the widget's view (what Jupyter, Colab and VS Code show while the kernel runs):
- the figure of its first setting, as ``image/png`` (or, with a table, ``text/html``): what a
  front end without the widget's model shows (GitHub, nbviewer, an untrusted notebook);
- ``application/vnd.tpviz.live+json`` (:data:`LIVE_MIME`), for topics that declare a live
  figure: which :class:`tpviz.core.live.LiveFigure` to draw, from which setting. No kernel
  front end renders this type; the book's build turns it into the live figure
  (:func:`tpviz.core.live.book_html`, called by ``web/tpviz_book.py``). The kernel builds no
  HTML for the book and a saved notebook holds none of it (a few hundred bytes instead of up
  to 1.5 MB per explorer).
"""

from __future__ import annotations

import base64
import html as html_text
import sys
from collections.abc import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import HTML, Image, display
from matplotlib.figure import Figure

from tpviz import compat
from tpviz.core import figures, validate
from tpviz.core.live import LIVE_NOTE  # noqa: F401 (the book's caption, re-exported)
from tpviz.errors import ArgumentError, ArgumentTypeError, TpvizError

STATIC_NOTE = ("Figure of the default settings. The controls are live when you run this notebook "
               "(Jupyter, Colab or Binder).")
#: the MIME type that names an explorer's live figure for the book's build (ignored by kernels'
#: front ends, which have no renderer for it)
LIVE_MIME = "application/vnd.tpviz.live+json"


def png(fig: Figure) -> bytes:
    """Render a figure to PNG bytes (and close it if pyplot manages it)."""
    data = figures.png(fig)
    plt.close(fig)
    return data


class Live:
    """A widget plus a static figure of its first setting, chosen by the front end.

    ``figure`` (a module-level :class:`tpviz.core.live.LiveFigure`, named ``where`` =
    ``"module:NAME"``) is the book's live figure of this explorer, started at ``starts``.
    """

    def __init__(self, widget: widgets.Widget, static: bytes, note: str = STATIC_NOTE,
                 html: str = "", figure=None, starts: dict | None = None, name: str = "",
                 where: str = ""):
        self.widget, self.static, self.note, self.html = widget, static, note, html
        self.figure, self.starts, self.name, self.where = figure, starts or {}, name, where

    def book_payload(self) -> dict | None:
        """What the book's build needs to draw the live figure (``None``: no live figure)."""
        if self.figure is None:
            return None
        return {"figure": self.where, "name": self.name, "starts": self.starts}

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = compat.widget_bundle(self.widget)  # ipywidgets 7 and 8
        data = base64.b64encode(self.static).decode()
        if self.html or self.figure is None:  # the table goes with the figure; or the note
            bundle["text/html"] = (f'{self.html}<figure><img src="data:image/png;base64,{data}" '
                                   f'alt="{self.note}"/><figcaption><em>{self.note}</em>'
                                   "</figcaption></figure>")
        else:
            bundle["image/png"] = data
        bundle["text/plain"] = self.note
        payload = self.book_payload()
        if payload is not None:
            bundle[LIVE_MIME] = payload
        return bundle


class Refusal:
    """A setting the library refuses, as the widget shows it: an HTML paragraph, which wraps
    between words (JupyterLab breaks printed output anywhere, mid-word), or the plain line."""

    def __init__(self, message: str):
        self.text = f"⚠ {message}"

    def __repr__(self) -> str:  # what display() prints outside a kernel
        return self.text

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": f'<p class="tpviz-refused">{html_text.escape(self.text)}</p>',
                "text/plain": self.text}


def _where(figure, render: Callable) -> str:
    """``"module:NAME"`` of ``figure``, a LiveFigure at the top level of ``render``'s module
    (the book's build imports it from there)."""
    module = sys.modules.get(getattr(render, "__module__", ""), None)
    for name, value in vars(module).items() if module is not None else ():
        if value is figure:
            return f"{module.__name__}:{name}"
    raise ArgumentError(f"live(figure=...): the live figure of {render.__name__} must be a "
                        f"top-level name of {getattr(render, '__module__', '?')} (e.g. LIVE = "
                        "LiveFigure(...)), so that the book's build can import it.")


Rendered = Figure | str | tuple[str, Figure]


def live(controls: dict[str, widgets.ValueWidget], render: Callable[..., Rendered],
         figure=None) -> Live:
    """Wire ``controls`` to ``render(**values)``: a figure, ``(html, figure)`` (a table shown
    above the figure: HTML costs the redraw nothing), or a message for bad settings.
    ``figure``: the topic's :class:`tpviz.core.live.LiveFigure`, which the static book shows
    instead of the PNG (starting from the controls' values where its grids hold them)."""
    where = _where(figure, render) if figure is not None else ""
    out = widgets.Output()

    def show(result: Rendered) -> None:
        if isinstance(result, tuple):
            display(HTML(result[0]))
            result = result[1]
        if isinstance(result, Figure):
            display(result)
            plt.close(result)
        else:
            display(Refusal(result))

    def redraw(_=None):
        values = {k: w.value for k, w in controls.items()}
        with out:
            out.clear_output(wait=True)
            try:
                result = render(**values)
            except TpvizError as e:  # bad settings: say why, keep the controls alive
                result = str(e)
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
                name=getattr(render, "__name__", "figure"), where=where)


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
