"""Live figures for the static book: a plan evaluated over a grid of settings at build time,
drawn by Vega-Lite in the reader's browser with controls bound to the chart's parameters.

A topic declares its live figure in a few lines, as ``LIVE`` in its ``explore.py``::

    LIVE = LiveFigure(
        controls={"stages": Grid([2, 4, 8], "stages p"), "name": Grid(NAMES, "schedule")},
        rows=lambda stages, name: [...],        # one setting -> the rows to plot (plan layer)
        chart=lambda base: base.mark_bar().encode(x="start:Q", y="device:O"))

:func:`spec` evaluates ``rows`` for every combination of the grids (the library's plan
layer, in Python, at build time), tags each row with its setting, and hands ``chart`` an
:class:`altair.Chart` already filtered to the setting the controls select. The browser only
filters precomputed rows: there is no second copy of the library's math in JavaScript.
:func:`embed` turns the chart into HTML that the book's own ``tpviz-live.js`` draws with the
Vega scripts served from the book's files (no CDN).
"""

from __future__ import annotations

import html
import importlib
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tpviz.errors import ArgumentError, TpvizError

#: the most settings one live figure precomputes (page size and build time stay small)
MAX_SETTINGS = 2000
#: font size (px) of every text in a live figure: >= 8 pt at the book's width
FONT = 12
#: a Vega parameter holding the width (px) the page drew the plots at (``tpviz-live.js`` sets
#: it after fitting the figure to its column): expressions can hide what would not fit
PLOT_PX = "_px"
#: the caption under every live figure of the book
LIVE_NOTE = ("Live figure: the controls work in this page (values precomputed from the library's "
             "plan). Run the notebook for every setting and the full drawing.")
#: outline of every bar and box: pale fills (Okabe-Ito's yellow, 1.3:1 on white) stay >= 3:1
OUTLINE = "#333333"


_RESERVED = {
    "break", "case", "catch", "class", "const", "continue", "debugger", "default", "delete", "do",
    "else", "export", "extends", "false", "finally", "for", "function", "if", "import", "in",
    "instanceof", "new", "null", "return", "super", "switch", "this", "throw", "true", "try",
    "typeof", "var", "void", "while", "with", "yield", "let", "static", "enum", "await", "datum",
    "event", "item", "parent"}


@dataclass(frozen=True)
class Grid:
    """The values one control of a live figure offers (the first is where it starts, unless
    ``start`` says otherwise), and its label."""

    values: Sequence
    label: str
    start: object = None
    in_rows: bool = True  # False: only the chart's expressions read it (rows do not change)

    def first(self):
        return self.values[0] if self.start is None else self.start


@dataclass(frozen=True)
class LiveFigure:
    """A live figure: value grids of its controls, ``rows(**setting)`` -> list of dicts (from
    the plan layer), and ``chart(base)`` -> an Altair chart drawing ``base``'s rows."""

    controls: dict[str, Grid]
    rows: Callable[..., list[dict]]
    chart: Callable
    fixed: dict = field(default_factory=dict)  # settings passed to rows but not controlled

    def __post_init__(self):
        for name in self.controls:  # a control is a Vega parameter: a name its expressions read
            if not name.isidentifier() or name in _RESERVED or name.startswith("_"):
                raise ArgumentError(f"LiveFigure: control name {name!r} cannot name a Vega "
                                    "parameter; rename it (not a JavaScript word).")

    def settings(self) -> list[dict]:
        """Every combination of the controls' values."""
        names = [n for n, g in self.controls.items() if g.in_rows]
        combos = list(itertools.product(*(self.controls[n].values for n in names)))
        if len(combos) > MAX_SETTINGS:
            raise ArgumentError(f"LiveFigure: {len(combos)} settings; at most {MAX_SETTINGS} "
                                "(use fewer values per control).")
        return [dict(zip(names, c, strict=True)) for c in combos]


def table(live: LiveFigure) -> tuple[list[dict], dict[str, int]]:
    """All rows of all settings, and which rows each setting shows: settings that draw the same
    rows share them (field ``_id``); ``ids`` maps a setting's key (:func:`key`) to its ``_id``.
    A setting the plan refuses gets one row, a ``note`` saying why."""
    rows, ids, seen = [], {}, {}
    for setting in live.settings():
        try:
            drawn = live.rows(**setting, **live.fixed)
        except TpvizError as e:
            drawn = [{"note": f"⚠ {e}"}]
        text = json.dumps(drawn, sort_keys=True)
        if text not in seen:
            seen[text] = len(seen)
            rows.extend({**r, "_id": seen[text]} for r in drawn)
        ids[key(setting.values())] = seen[text]
    return rows, ids


def key(values) -> str:
    """A setting's key, written as JavaScript writes ``a + '|' + b`` of the same values."""
    return "|".join(_js(v) for v in values)


def _js(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(int(v)) if float(v).is_integer() else repr(float(v))
    return str(v)


def _binding(alt, name: str, grid: Grid):
    values = list(grid.values)
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    steps = {round(b - a, 9) for a, b in itertools.pairwise(values)} if numeric else set()
    if numeric and len(values) > 2 and len(steps) == 1:
        bind = alt.binding_range(min=values[0], max=values[-1], step=steps.pop(),
                                 name=grid.label + " ")
    else:
        bind = alt.binding_select(options=values, name=grid.label + " ")
    return alt.param(name=name, value=grid.first(), bind=bind)


def spec(live: LiveFigure) -> dict:
    """The Vega-Lite spec of ``live`` (via Altair): the controls bound to parameters, a
    parameter ``_id`` that looks the chosen setting up, and the rows inline, filtered to it."""
    import altair as alt

    rows, ids = table(live)
    params = [_binding(alt, n, g) for n, g in live.controls.items()]
    lookup = json.dumps(ids, separators=(",", ":"), ensure_ascii=False)
    setting = " + '|' + ".join(f"({n} + '')" for n, g in live.controls.items()
                               if g.in_rows) or "''"
    params.append(alt.param(name="_id", expr=f"{lookup}[{setting}]"))
    params.append(alt.param(name=PLOT_PX, value=640))
    base = alt.Chart(alt.NamedData(name="rows")).transform_filter("datum._id == _id")
    chart = live.chart(base).add_params(*params).configure(font="sans-serif").configure_view(
        stroke=None).configure_bar(stroke=OUTLINE, strokeWidth=0.6).configure_rect(
        stroke=OUTLINE, strokeWidth=0.6).configure_axis(
        labelFontSize=FONT, titleFontSize=FONT).configure_legend(
        labelFontSize=FONT, titleFontSize=FONT).configure_title(fontSize=FONT + 1)
    out = chart.to_dict()  # validated while small; the rows go in after
    out["datasets"] = {"rows": rows}
    return out


def starting(live: LiveFigure, values: dict) -> LiveFigure:
    """``live`` with each control starting at ``values[name]`` where its grid holds that value
    (an explorer called with other arguments opens the static figure there)."""
    controls = {n: Grid(g.values, g.label, values[n], g.in_rows)
                if values.get(n) in list(g.values) else g for n, g in live.controls.items()}
    return LiveFigure(controls, live.rows, live.chart, live.fixed)


def embed(live: LiveFigure, name: str) -> str:
    """HTML for the static book: the Vega-Lite spec of ``live`` in a ``<div>`` that the book's
    ``tpviz-live.js`` draws (with the Vega scripts the book serves itself)."""
    text = json.dumps(spec(live), separators=(",", ":")).replace("</", "<\\/")
    return (f'<div class="tpviz-live" data-name="{html.escape(name)}">'
            f'<script type="application/json">{text}</script>'
            "<noscript>This figure needs JavaScript.</noscript></div>")


def book_html(payload: dict) -> str:
    """The book's live figure of an explorer, from the payload its output carries
    (:data:`tpviz.core.widgets.LIVE_MIME`: ``{"figure": "tpviz.topic.explore:LIVE", "name":
    render function's name, "starts": the controls' values}``), with its caption. The book's
    build calls this (``web/tpviz_book.py``); the kernel never does."""
    where = str(payload.get("figure", ""))
    module, _, attr = where.partition(":")
    if not (module.startswith("tpviz.") and attr.isidentifier()):
        raise ArgumentError(f"book_html: figure {where!r} is not 'tpviz.<topic>.explore:NAME'.")
    figure = getattr(importlib.import_module(module), attr, None)
    if not isinstance(figure, LiveFigure):
        raise ArgumentError(f"book_html: {where} is not a LiveFigure.")
    shown = embed(starting(figure, dict(payload.get("starts") or {})),
                  str(payload.get("name") or attr))
    return f"<figure>{shown}<figcaption><em>{LIVE_NOTE}</em></figcaption></figure>"


def notes(base, width: int = 640):
    """Lines of text (rows with ``note``, in order): what the figure says in words."""
    import altair as alt

    # no width limit: the book's tpviz-live.js wraps a long note into lines of the column's width
    return base.transform_filter("isValid(datum.note)").transform_window(
        line="row_number()").mark_text(align="left", baseline="middle", fontSize=FONT).encode(
        text="note:N", x=alt.value(0), y=alt.Y("line:O", axis=None)).properties(
        width=width, height={"step": FONT + 6})


def bars(base, x_title: str, width: int = 640, colour: str = "#0072B2"):
    """Horizontal bars (rows with ``what``, ``value`` and ``text``), each labelled; a row with
    ``bold`` true is drawn darker (the chosen one)."""
    import altair as alt

    rows = base.transform_filter("isValid(datum.what)")
    y = alt.Y("what:N", sort=None, title=None, axis=alt.Axis(labelLimit=260))
    bar = rows.mark_bar(color=colour).encode(
        x=alt.X("value:Q", title=x_title), y=y,
        opacity=alt.condition("datum.bold", alt.value(1.0), alt.value(0.55)))
    label = rows.mark_text(align="left", dx=3, fontSize=FONT).encode(
        x="value:Q", y=y, text="text:N")
    room = rows.transform_calculate(room="datum.value * 1.6").mark_point(opacity=0).encode(
        x="room:Q", y=y)  # the labels' room inside the plot
    return alt.layer(bar, label, room).properties(width=width, height={"step": 24})


def words_and_bars(base, x_title: str):
    """The common live figure: notes above labelled bars."""
    import altair as alt

    return alt.vconcat(notes(base), bars(base, x_title))


def bar_rows(items, lines=()) -> list[dict]:
    """Rows for :func:`words_and_bars`: ``items`` of (what, value, text[, bold]) and ``lines``
    of text."""
    rows = [{"note": line} for line in lines]
    for what, value, text, *bold in items:
        rows.append({"what": what, "value": round(float(value), 6), "text": text,
                     "bold": bool(bold and bold[0])})
    return rows
