"""``explore_layout``: a mesh shape and a sharding in the notation → who holds which block."""

from __future__ import annotations

from matplotlib.figure import Figure

from tpviz.core.notation import parse
from tpviz.core.widgets import Controls, Live, live
from tpviz.layouts.draw import sharding

MESHES = {"X=8": {"X": 8}, "X=2, Y=4": {"X": 2, "Y": 4}, "X=4, Y=2": {"X": 4, "Y": 2},
          "X=2, Y=2, Z=2": {"X": 2, "Y": 2, "Z": 2}}


def render_layout(mesh: str, notation: str, rows: int, cols: int, dtype: str) -> Figure:
    """The figure ``explore_layout`` shows for one setting (also used by the benchmarks)."""
    parsed = parse(notation)
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
    return live(controls, render_layout)


# settings the benchmarks time (benchmarks/budgets.py finds this list in every topic)
BENCHMARKS = [(render_layout, dict(mesh="X=2, Y=4", notation="A[I_X, J_Y]", rows=8, cols=16,
                                   dtype="float32")),
              (render_layout, dict(mesh="X=2, Y=2, Z=2", notation="A[I_XY, J_Z]", rows=32,
                                   cols=32, dtype="bf16")),
              (render_layout, dict(mesh="X=8", notation="A[I, J_X]", rows=32, cols=32,
                                   dtype="int8"))]
