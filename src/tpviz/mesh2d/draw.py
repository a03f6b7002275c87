"""Drawings of the 2D MLP: each step on the mesh, the steps as an animation, and the comparison
of memory and communication with data parallelism and 1D Megatron.

In a step drawing every cell is one device, placed as on the mesh (data down, model across). In
it, each array of the step is drawn at its full shape; the part this device holds is filled.
Hatching marks partial sums (to be added over the model axis).
"""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from tpviz.core import layout
from tpviz.core.figures import OKABE_ITO, SMALL_PT, TITLE_PT, Animation, frame, gif
from tpviz.core.figures import figure as column_figure
from tpviz.core.kinds import Axes, Index, Size
from tpviz.core.validate import integer
from tpviz.errors import ShardingError
from tpviz.mesh2d.choose import Scheme
from tpviz.mesh2d.plan import DATA, MODEL, PRE, Array, Plan

COLOURS = {"In": OKABE_ITO[4], "W₁": OKABE_ITO[0], "W₂": OKABE_ITO[2], PRE: OKABE_ITO[6],
           "Tmp": OKABE_ITO[6], "Out": OKABE_ITO[5]}
SIGNS = {"start": ("",), "all-gather": ("→",), "matmul": ("·", "="), "relu": ("→",),
         "reduce-scatter": ("→",)}


def _colour(a: Array) -> str:
    return COLOURS.get(a.name) or COLOURS[a.name.rstrip("'")]


def _held(a: Array, mesh: dict[str, int]) -> dict[int, tuple[slice, ...]]:
    """Device (flat mesh position) -> the block of ``a`` it holds."""
    return {dev: b.slices for b in layout.blocks(a.shape, a.spec, mesh) for dev in b.devices}


def step(p: Plan, k: Index, ax: Axes | None = None) -> Figure:
    """Step ``k`` of the plan on the mesh: what every device holds before and after it."""
    k = integer("k", k, minimum=0, maximum=len(p.steps) - 1, error=ShardingError)
    s = p.steps[k]
    arrays = [*s.operands, s.result] if s.op != "start" else list(s.operands)
    signs = SIGNS[s.op]
    d, m = p.mesh_sizes
    if ax is None:
        height = 1.05 + 0.95 * d
        fig = column_figure(height, 9)  # a fixed layout: constrained layout is slower
        ax = fig.subplots()
        fig.subplots_adjust(left=0.07, right=0.995, top=1 - 0.72 / height, bottom=0.01)
    fig = ax.figure
    box = ax.get_position()  # a cell is 1 × 1 in data units; make array elements square
    stretch = (fig.get_figwidth() * box.width / m) / (fig.get_figheight() * box.height / d)
    slot = 0.84 / len(arrays)  # width of one array inside a cell
    scale = min(slot * 0.8 / max(a.shape[1] for a in arrays),  # one column, in x units
                0.62 / stretch / max(a.shape[0] for a in arrays))
    for a_i, a in enumerate(arrays):
        held = _held(a, p.mesh)
        w, h = a.shape[1] * scale, a.shape[0] * scale * stretch
        for dev, slices in held.items():
            row, col = divmod(dev, m)
            x0 = col + 0.08 + a_i * slot + (slot * 0.8 - w) / 2
            y0 = row + 0.26 + (0.64 - h) / 2
            ax.add_patch(Rectangle((x0, y0), w, h, facecolor="white", edgecolor="#999999",
                                   linewidth=0.6))
            rs, cs = slices
            ax.add_patch(Rectangle((x0 + cs.start * scale, y0 + rs.start * scale * stretch),
                                   (cs.stop - cs.start) * scale,
                                   (rs.stop - rs.start) * scale * stretch,
                                   facecolor=_colour(a), edgecolor="none",
                                   hatch="///" if a.partial else None))
            if row == 0:
                ax.text(x0 + w / 2, row + 0.24, a.name, ha="center", va="bottom", fontsize=SMALL_PT)
            if a_i < len(arrays) - 1 and signs[min(a_i, len(signs) - 1)]:
                ax.text(col + 0.08 + (a_i + 1) * slot - slot * 0.1, row + 0.58,
                        signs[min(a_i, len(signs) - 1)], ha="center", va="center",
                                fontsize=TITLE_PT)
    for dev in range(d * m):
        row, col = divmod(dev, m)
        ax.add_patch(Rectangle((col + 0.03, row + 0.03), 0.94, 0.94, facecolor="none",
                               edgecolor="#444444", linewidth=0.8))
        ax.text(col + 0.06, row + 0.08, f"D{dev}", fontsize=SMALL_PT, va="top", color="#444444")
    ax.set_xlim(0, m)
    ax.set_ylim(d, 0)
    ax.set_xticks([c + 0.5 for c in range(m)], [f"model {c}" for c in range(m)], fontsize=SMALL_PT)
    ax.set_yticks([r + 0.5 for r in range(d)], [f"data {r}" for r in range(d)], fontsize=SMALL_PT)
    ax.tick_params(length=0, labeltop=True, labelbottom=False)
    for side in ax.spines.values():
        side.set_visible(False)
    moved = (f"{s.op} over {s.axis} ({s.group} devices per group): {s.bytes:,} bytes per device"
             if s.communicates else "no communication")
    shapes = ", ".join(f"{a.name}: {'×'.join(map(str, a.local))}" for a in arrays)
    ax.set_title(f"step {k}: {s.what}\n{moved}; per device {shapes}", fontsize=SMALL_PT, loc="left",
                 pad=18)
    return ax.figure


def animate(p: Plan, ms_per_frame: Size(60_000, "a minute a frame") = 1400) -> Animation:
    """All steps of the plan in turn, as an animated GIF (it plays in the static book too)."""
    images = [frame(FigureCanvasAgg(step(p, k))) for k in range(len(p.steps))]
    return gif(images, f"The {len(p.steps)} steps of the 2D MLP on a data={p.mesh[DATA]} × "
                       f"model={p.mesh[MODEL]} mesh", ms_per_frame)


def comparison(schemes: list[Scheme], title: str = "", axes: tuple[Axes, Axes] | None = None,
               chosen: str = "") -> Figure:
    """Memory per device and bytes sent per device per training step, scheme by scheme (the
    ``chosen`` one in bold); ``axes``: two axes to draw into."""
    if axes is None:
        height = 1.6 + 0.4 * len(schemes)
        fig = column_figure(height)
        axes = fig.subplots(1, 2, sharey=True)
        fig.subplots_adjust(left=0.17, right=0.98, top=1 - 1.2 / height, bottom=0.45 / height,
                            wspace=0.08)
    left, right = axes
    fig = left.figure
    names = [s.name for s in schemes]
    ys = range(len(schemes))
    mib = 2**20
    stored = [s.memory.weights / mib for s in schemes]
    gathered = [(s.memory.weights_held - s.memory.weights) / mib for s in schemes]
    acts = [s.memory.activations / mib for s in schemes]
    left.barh(ys, stored, color=OKABE_ITO[0], label="weights stored")
    left.barh(ys, gathered, left=stored, color=OKABE_ITO[0], alpha=0.45,
              label="weights gathered")
    left.barh(ys, acts, left=[a + b for a, b in zip(stored, gathered, strict=True)],
              color=OKABE_ITO[4], label="activations saved")
    right.barh(ys, [s.forward_sent / mib for s in schemes], color=OKABE_ITO[5], label="forward")
    right.barh(ys, [(s.step_sent - s.forward_sent) / mib for s in schemes],
               left=[s.forward_sent / mib for s in schemes], color=OKABE_ITO[5], alpha=0.45,
               label="backward")
    left.set_yticks(list(ys), names, fontsize=SMALL_PT)
    for label in left.get_yticklabels():
        label.set_fontweight("bold" if label.get_text() == chosen else "normal")
    left.invert_yaxis()
    left.set_xlabel("MiB per device", fontsize=SMALL_PT)
    right.set_xlabel("MiB sent per device per step (ring)", fontsize=SMALL_PT)
    for ax in (left, right):
        ax.legend(fontsize=SMALL_PT, loc="lower left", bbox_to_anchor=(0, 1), ncols=2,
                  frameon=False, handlelength=1, columnspacing=0.8)
        ax.tick_params(labelsize=SMALL_PT)
    if title:
        fig.suptitle(title, fontsize=SMALL_PT, x=0.01, y=0.995, ha="left", va="top")
    return fig


