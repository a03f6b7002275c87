"""What a reader would see wrong in a drawn figure, measured on the drawn figure itself.

:func:`layout_problems` draws a matplotlib figure as its PNG would be drawn and lists:
- text cut off: any visible text (titles, labels, ticks, annotations, legends, figure text)
  reaching past the image's edge;
- text over text: two visible texts whose boxes overlap (e.g. two point labels);
- a legend over the data: a legend box that covers a point of a plotted line.

The tests of every explorer run it over the settings its controls offer; an empty list is a
figure whose words all read.
"""

from __future__ import annotations

from itertools import combinations, pairwise

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cbook import STEP_LOOKUP_MAP
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Text

#: pixels a text may touch its neighbour or the edge by (anti-aliasing, rounding)
SLACK_PX = 1.0


def _undrawn_ticks(fig: Figure) -> set[int]:
    """Tick labels matplotlib keeps but does not draw: their ticks lie outside the view, or
    their axis is off."""
    out = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if not ax.axison or not axis.get_visible():  # an axis turned off draws no text
                out.update(id(t) for tick in axis.get_major_ticks() + axis.get_minor_ticks()
                           for t in (tick.label1, tick.label2))
                out.add(id(axis.label))
                continue
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * max(1.0, abs(hi - lo))
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                loc = tick.get_loc()
                if loc is None or not lo - eps <= loc <= hi + eps:
                    out.update((id(tick.label1), id(tick.label2)))
    return out


def _texts(fig: Figure) -> list[Text]:
    seen, out = _undrawn_ticks(fig), []
    for t in fig.findobj(Text):
        if id(t) in seen or not t.get_visible() or not t.get_text().strip():
            continue
        seen.add(id(t))
        out.append(t)
    return out


def _name(t: Text) -> str:
    return repr(t.get_text().replace("\n", " ")[:60])


def _overlap(a, b) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > SLACK_PX
            and min(a.y1, b.y1) - max(a.y0, b.y0) > SLACK_PX)


def _legend_inside(t: Text, legends: list[Legend]) -> Legend | None:
    return next((lg for lg in legends if t in lg.get_texts() or t is lg.get_title()), None)


def layout_problems(fig: Figure) -> list[str]:
    """Texts cut by the image's edge, texts over each other, legends over plotted lines."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    page = fig.bbox
    legends = [a for a in fig.findobj(Legend) if a.get_visible()]
    texts = _texts(fig)
    boxes = {id(t): t.get_window_extent(renderer) for t in texts}
    bad = []
    for t in texts:
        b = boxes[id(t)]
        if (b.x0 < page.x0 - SLACK_PX or b.y0 < page.y0 - SLACK_PX
                or b.x1 > page.x1 + SLACK_PX or b.y1 > page.y1 + SLACK_PX):
            bad.append(f"text {_name(t)} is cut by the image's edge ({b.x0:.0f}..{b.x1:.0f} px "
                       f"of {page.width:.0f}, {b.y0:.0f}..{b.y1:.0f} px of {page.height:.0f})")
    for s, t in combinations(texts, 2):
        same = _legend_inside(s, legends)
        if same is not None and same is _legend_inside(t, legends):
            continue  # a legend lays out its own entries
        if _overlap(boxes[id(s)], boxes[id(t)]):
            bad.append(f"texts {_name(s)} and {_name(t)} overlap")
    for lg in legends:
        box = lg.get_window_extent(renderer)
        axes = lg.axes if lg.axes is not None else None
        lines = axes.get_lines() if axes is not None else []
        for line in lines:
            if not line.get_visible() or not _is_data(line):
                continue
            xy = _dense(line.get_transform().transform(_drawn(line)))
            inside = ((xy[:, 0] > box.x0 + SLACK_PX) & (xy[:, 0] < box.x1 - SLACK_PX)
                      & (xy[:, 1] > box.y0 + SLACK_PX) & (xy[:, 1] < box.y1 - SLACK_PX))
            if inside.any():
                label = line.get_label() if not line.get_label().startswith("_") else "a line"
                bad.append(f"the legend covers {label!r}")
    return bad


def _is_data(line: Line2D) -> bool:
    """A plotted line (not a legend's own handle, not an axis-wide guide such as axvline)."""
    x, _y = (np.asarray(v, dtype=float) for v in line.get_data())
    return x.size > 1 and np.ptp(x) > 0 and line.get_transform() is line.axes.transData


def _drawn(line: Line2D) -> np.ndarray:
    """The line's points as drawn (a step plot's corners included)."""
    x, y = (np.asarray(v, dtype=float) for v in line.get_data())
    style = line.get_drawstyle()
    if style in STEP_LOOKUP_MAP and style != "default":
        x, y = STEP_LOOKUP_MAP[style](x, y)
    return np.column_stack([x, y])


def _dense(xy: np.ndarray, step_px: float = 2.0) -> np.ndarray:
    """Points along a polyline every ``step_px`` pixels (a segment can cross a legend between
    its ends)."""
    out = [xy[:1]]
    for a, b in pairwise(xy):
        n = max(1, int(np.hypot(*(b - a)) / step_px))
        out.append(a + (b - a) * np.linspace(0, 1, n + 1)[1:, None])
    return np.concatenate(out)
