"""Chapter 6's build checkers on :mod:`tpviz.core.harness`: the last step with a LayerNorm
(6.3) and the whole 2D MLP by hand (6.6)."""

from __future__ import annotations

import numpy as np

from tpviz.core import harness, harness_report
from tpviz.core.exercises import checker
from tpviz.mesh2d import run
from tpviz.mesh2d.plan import DATA, MODEL, plan

# the library's 2D MLP: its per-device program, steps and last step solve 6.3 and 6.6
LIBRARY = ("tpviz.mesh2d.run.mlp", "tpviz.mesh2d.run.steps", "tpviz.mesh2d.run.forward",
           "tpviz.mesh2d.run.reduce_scatter", "tpviz.mesh2d.run.measured_shapes",
           "tpviz.mesh2d.check", "tpviz.mesh2d.run.gspmd_forward")
AXES = (DATA, MODEL)
EPS = 1e-5  # the LayerNorm of Exercise 6.3


def _mlp_inputs(s: dict, rng) -> tuple:
    b, d, f = s["B"], s["D"], s["F"]
    return (rng.standard_normal((b, d), dtype=np.float32),
            (rng.standard_normal((d, f)) / 3).astype(np.float32),
            (rng.standard_normal((f, d)) / 6).astype(np.float32))


def _expected(case) -> list:
    b, d, f = (case.sizes[k] for k in ("B", "D", "F"))
    p = plan(b, d, f, (case.size(DATA), case.size(MODEL)))
    return [harness.Expect(c.kind, c.full_bytes, (c.axes[0],), what=_operand(c))
            for c in p.collectives()]


def _operand(c) -> str:
    """The array a planned collective moves: "Out'" of "reduce-scatter Out' along model" (the
    messages say the kind and the axis themselves)."""
    words = (c.what or "").split()
    if words[:1] == [c.kind]:
        words = words[1:]
    if len(words) >= 2 and words[-2] == "along":
        words = words[:-2]
    return " ".join(words)


def layer_norm(y):
    """Each row of ``y`` to mean 0 and variance 1 (no learned scale or shift)."""
    y = np.asarray(y, np.float64)
    mean, var = y.mean(axis=1, keepdims=True), y.var(axis=1, keepdims=True)
    return ((y - mean) / np.sqrt(var + EPS)).astype(np.float32)


def _statistics_only(case, found) -> str | None:
    """The MLP's collectives exactly, plus all-reduces along model of at most two numbers per
    row of this device's block (each row's sum and sum of squares)."""
    rows = case.sizes["B"] // case.size(DATA)
    stats = [x for x in found if x[0].kind == "all-reduce" and x[1] == (MODEL,)
             and x[0].full_bytes <= 2 * rows * 4]
    rest = [x for x in found if not any(x is y for y in stats)]
    mistake = harness_report.compare(rest, _expected(case))
    if mistake:
        return mistake
    if sum(c.full_bytes for c, _ in stats) > 2 * rows * 4 or len(stats) > 2:
        return ("the statistics move more than two numbers per row of the block: all-reduce "
                "each row's sum and sum of squares, not the rows")
    if not stats and case.size(MODEL) > 1:
        return "no all-reduce of the rows' statistics: each device sees only D/N_Y of a row"
    return None


FINAL = harness.Build(
    what="the 2D MLP with your last step", axes=AXES,
    layouts=("In[B_{data}, D_{model}]", "W1[D_{data}, F_{model}]", "W2[F_{model}, D_{data}]"),
    out="Out[B_{data}, D_{model}]", program=lambda fn, case: run.forward(case.mesh, final=fn),
    inputs=_mlp_inputs, reference=lambda x, w1, w2: layer_norm(run.reference(x, w1, w2)),
    cases=(((4, 2), {"B": 16, "D": 8, "F": 32}), ((4, 2), {"B": 8, "D": 12, "F": 16}),
           ((2, 4), {"B": 8, "D": 8, "F": 16})),
    extra=_statistics_only, unavailable=("tpviz.mesh2d.run.reduce_scatter",),
    hint="First one collective adds the partial sums over the model axis and leaves each device "
         "its slice of the columns, as In was split. A row's mean and variance then need the "
         "other devices' columns: what is the least each device can send for them?",
    praise="Out is sharded like In, normalised, with only each row's statistics all-reduced.",
    rtol=1e-3, atol=1e-3)


@checker("The final reduce-scatter")
def check_final_reduce_scatter(fn) -> str:
    """``fn(partial)`` per device: ``Out'[B/N_X, D]`` (partial sums over "model") → this
    device's block ``[B/N_X, D/N_Y]`` of LayerNorm(Out) (each row to mean 0, variance 1 over D,
    eps 1e-5), used as the last step of the 2D MLP on the (4, 2) and (2, 4) meshes at several
    sizes: the step table's collectives, plus all-reduces of at most two numbers per row."""
    return harness.grade(fn, FINAL)


MLP2D = harness.Build(
    what="your 2D MLP", axes=AXES,
    layouts=("In[B_{data}, D_{model}]", "W1[D_{data}, F_{model}]", "W2[F_{model}, D_{data}]"),
    out="Out[B_{data}, D_{model}]", inputs=_mlp_inputs,
    reference=lambda x, w1, w2: np.asarray(run.reference(x, w1, w2)),
    cases=(((2, 4), {"B": 16, "D": 8, "F": 32}), ((2, 4), {"B": 8, "D": 16, "F": 16}),
           ((4, 2), {"B": 16, "D": 8, "F": 32})),
    collectives=_expected, unavailable=LIBRARY,
    hint="Follow the seven steps: which arrays must be completed along which axis before each "
         "matmul, and what makes the partial sums whole again?",
    praise="Out exact, with the step table's collectives, axes and bytes.")


@checker("The 2D MLP, by hand")
def check_mlp2d(fn) -> str:
    """``fn(x, w1, w2)`` per device on (data, model) meshes 2 × 4 and 4 × 2 at several sizes,
    with In[B_data, D_model], W₁[D_data, F_model], W₂[F_model, D_data]: returns Out sharded like
    In. The compiled program must hold exactly the plan's collectives (kind, axis, bytes)."""
    return harness.grade(fn, MLP2D)
