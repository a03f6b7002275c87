"""``explore_layout``: a mesh shape and a sharding in the notation → who holds which block."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core import layout
from tpviz.core.kinds import DRAWN, Dtype, OneOf, Size
from tpviz.core.layout import validate_spec
from tpviz.core.live import FONT, OUTLINE, Grid, LiveFigure, notes
from tpviz.core.notation import parse
from tpviz.core.widgets import Controls, Live, live
from tpviz.errors import ShardingError
from tpviz.layouts.draw import sharding

MESHES = {"X=8": {"X": 8}, "X=2, Y=4": {"X": 2, "Y": 4}, "X=4, Y=2": {"X": 4, "Y": 2},
          "X=2, Y=2, Z=2": {"X": 2, "Y": 2, "Z": 2}}


def render_layout(mesh: OneOf(MESHES), notation: str, rows: Size(64, DRAWN),
                  cols: Size(64, DRAWN), dtype: Dtype) -> Figure:
    """The figure ``explore_layout`` shows for one setting (also used by the benchmarks)."""
    parsed = parse(notation)
    try:
        validate_spec((rows, cols), parsed.spec, MESHES[mesh])
    except ShardingError as e:
        raise ShardingError(f"notation = {notation!r}: {e}") from None
    return sharding((rows, cols), parsed.spec, MESHES[mesh], name=parsed.name, dtype=dtype)


def explore_layout(mesh: str = "X=2, Y=4", notation: str = "A[I_X, J_Y]", rows: int = 8,
                   cols: int = 16, dtype: str = "float32") -> Live:
    """Mesh shape and sharding notation → the layout drawing and the bytes each device holds."""
    c = Controls("explore_layout")
    controls = {
        "mesh": c.dropdown("mesh", mesh, MESHES, "mesh"),
        "notation": c.text_box("notation", notation, "sharding"),
        "dtype": c.dropdown("dtype", dtype, ["float32", "bf16", "int8"], "dtype"),
        "rows": c.int_slider("rows", rows, 1, 32, "rows"),
        "cols": c.int_slider("cols", cols, 1, 32, "columns"),
    }
    return live(controls, render_layout, figure=LIVE)


def layout_rows(mesh: str, notation: str, rows: int, cols: int, dtype: str) -> list[dict]:
    """The live figure's rows (from :mod:`tpviz.core.layout`): each block of the array, the
    devices holding it, and the bytes per device in words."""
    parsed, shape = parse(notation), (rows, cols)
    out = [{"r0": b.slices[0].start, "r1": b.slices[0].stop, "c0": b.slices[1].start,
            "c1": b.slices[1].stop, "who": ",".join(f"D{d}" for d in b.devices),
            "first": b.devices[0]}
           for b in layout.blocks(shape, parsed.spec, MESHES[mesh])]
    per = layout.bytes_per_device(shape, dtype, parsed.spec, MESHES[mesh])
    out.append({"note": f"{notation} on mesh {mesh}: each device holds "
                        f"{layout.shard_shape(shape, parsed.spec, MESHES[mesh])} = {per:,} bytes "
                        f"({dtype}); each block is on "
                        f"{layout.replication(parsed.spec, MESHES[mesh])} device(s)"})
    return out


def layout_chart(base):
    """The array as blocks: rows down, columns across; colour and label = who holds it."""
    import altair as alt

    cells = base.transform_filter("isValid(datum.who)")
    rect = cells.mark_rect(stroke=OUTLINE, strokeWidth=1).encode(
        x=alt.X("c0:Q", title="column J", scale=alt.Scale(nice=False)), x2="c1:Q",
        y=alt.Y("r0:Q", title="row I", scale=alt.Scale(reverse=True, nice=False)), y2="r1:Q",
        color=alt.Color("first:N", legend=None, scale=alt.Scale(scheme="tableau10")))
    text = cells.transform_calculate(x="(datum.c0 + datum.c1) / 2",
                                     y="(datum.r0 + datum.r1) / 2").mark_text(
        fontSize=FONT - 1).encode(x="x:Q", y="y:Q", text="who:N")
    return alt.vconcat(notes(base), alt.layer(rect, text).properties(width=560, height=280))


LIVE = LiveFigure(
    controls={"mesh": Grid(list(MESHES), "mesh", start="X=2, Y=4"),
              "notation": Grid(["A[I_X, J_Y]", "A[I_X, J]", "A[I, J_X]", "A[I_Y, J_X]",
                                "A[I_XY, J]", "A[I, J]"], "sharding"),
              "rows": Grid([8, 16], "rows", start=8),
              "cols": Grid([8, 16], "columns", start=16),
              "dtype": Grid(["float32", "bf16", "int8"], "dtype")},
    rows=layout_rows, chart=layout_chart)


# settings the benchmarks time (benchmarks/budgets.py finds this list in every topic)
BENCHMARKS = [(render_layout, dict(mesh="X=2, Y=4", notation="A[I_X, J_Y]", rows=8, cols=16,
                                   dtype="float32")),
              (render_layout, dict(mesh="X=2, Y=2, Z=2", notation="A[I_XY, J_Z]", rows=32,
                                   cols=32, dtype="bf16")),
              (render_layout, dict(mesh="X=8", notation="A[I, J_X]", rows=32, cols=32,
                                   dtype="int8"))]
