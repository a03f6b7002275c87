"""Chapter 11's ZeRO step on a data × tensor mesh (11.7), on :mod:`tpviz.core.harness`: each
data replica reduce-scatters its gradient over ``data``, updates its 1/d of the rows of a
tensor-sharded parameter with SGD and momentum (whose state it holds for those rows only), and
all-gathers the updated rows over ``data``."""

from __future__ import annotations

import numpy as np

from tpviz.core import harness
from tpviz.core.exercises import checker
from tpviz.together.builds import GRID, LAYERS

LR, BETA = 0.1, 0.9  # the step's learning rate and momentum
ZERO = ("tpviz.zero.run.step_fn", "tpviz.zero.run.start", "tpviz.zero.run.adam",
        "tpviz.zero.check.train", "tpviz.zero.measure", "tpviz.mesh2d.run.reduce_scatter")


def _inputs(s: dict, rng) -> tuple:
    d, h, f = s["devices"] // s["t"], s["H"], s["F"]
    return (rng.standard_normal((h, f), dtype=np.float32),  # the parameter
            (rng.standard_normal((h, f)) / 10).astype(np.float32),  # its momentum
            rng.standard_normal((d * h, f), dtype=np.float32))  # replica r's gradient: block r


def _update(w, m, g, d: int, divisor: int | None = None):
    """One device's step: the d replicas' gradients summed and divided by ``divisor`` (d: the
    mean), then SGD with momentum on every row."""
    g = np.asarray(g).reshape(d, *np.shape(w)).sum(0) / (divisor or d)
    m = BETA * np.asarray(m) + g
    return np.asarray(w) - LR * m, m


def _reference(w, m, g, case):
    return _update(w, m, g, case.size("data"))


def _mistakes(w, m, g, d: int) -> dict:
    """The parameter after a learner's usual slips, each with what it says."""
    mean = np.asarray(g).reshape(d, *np.shape(w)).sum(0) / d
    rows = np.shape(w)[0] // d
    own = np.concatenate([np.asarray(g)[r * (d + 1) * rows:(r * (d + 1) + 1) * rows]
                          for r in range(d)])  # replica r's own gradient, its rows r
    lag = "the replicas saw different tokens: sum the gradient over 'data' first"
    return {
        f"each replica's rows moved by its own gradient only: {lag}": w - LR * (BETA * m + own),
        f"each replica's rows moved by its own gradient over {d}: {lag}":
            w - LR * (BETA * m + own / d),
        "the parameter moved by the mean gradient alone: SGD with momentum moves it by the new "
        "momentum, m ← β·m + ḡ": w - LR * mean,
        "the parameter moved by the momentum passed in: update the momentum first, then move "
        "the parameter by the new one": w - LR * m,
        "the momentum added (1 − β)·ḡ: this step adds the mean gradient itself, m ← β·m + ḡ":
            w - LR * (BETA * m + (1 - BETA) * mean)}


def _diagnose(case, got, want) -> str | None:
    if not isinstance(got, tuple | list) or len(got) != 2:
        return None
    w, m, g = case.args
    d = case.size("data")
    got_w = np.asarray(got[0])
    if got_w.shape != np.shape(w):
        return None
    if np.allclose(got_w, _update(w, m, g, d, divisor=1)[0], rtol=1e-4, atol=1e-5):
        return (f"the parameter moved by the sum of the {d} replicas' gradients: the step "
                "uses their mean")
    for k in sorted({2, 4, 8} - {d}):
        if np.allclose(got_w, _update(w, m, g, d, divisor=k)[0], rtol=1e-4, atol=1e-5):
            return (f"the gradients' sum is divided by {k}, but this mesh has {d} data "
                    "replicas: read their number from the mesh")
    for message, other in _mistakes(w, m, g, d).items():
        if np.allclose(got_w, other, rtol=1e-4, atol=1e-5):
            return message
    if np.allclose(got_w, want[0], rtol=1e-4, atol=1e-5) and \
            np.allclose(np.asarray(got[1]), m, rtol=1e-4, atol=1e-5):
        return "the momentum returned is the one passed in: return its updated rows"
    rows = np.shape(w)[0] // d
    for r in range(d):  # one replica's own rows everywhere, the others' left as they were
        part = np.array(w)
        part[r * rows:(r + 1) * rows] = want[0][r * rows:(r + 1) * rows]
        if np.allclose(got_w, part, rtol=1e-4, atol=1e-5):
            return (f"only rows {r * rows}…{(r + 1) * rows - 1} of the parameter were updated: "
                    "each replica updates its own rows, and every replica needs all of them")
    return None


def _collectives(case) -> list:
    v = case.sizes["H"] * case.sizes["F"] // case.size("tensor") * 4  # [H, F/t] float32
    return [harness.Expect("reduce-scatter", v, ("data",), what="the gradient's shard"),
            harness.Expect("all-gather", v, ("data",), what="the updated rows")]


def _praise(case, found) -> str:
    d, t, s = case.size("data"), case.size("tensor"), case.sizes
    held = s["H"] // d * s["F"] // t * 4
    return (f"ZeRO on the data axis of a data × tensor mesh: each device holds the momentum of its "
            f"{s['H'] // d} rows only ({held:,} bytes, 1/{d} of its shard's rows).")


GRID_ZERO = harness.Build(
    what="your ZeRO step", names=("w", "m", "g"),
    layouts=("W[H, F_{tensor}]", "M[H_{data}, F_{tensor}]", "G[R_{data}, F_{tensor}]"),
    out=("W[H, F_{tensor}]", "M[H_{data}, F_{tensor}]"),
    out_names=("the new parameter", "the new momentum"), axes=GRID, inputs=_inputs,
    reference=_reference,
    cases=(((2, 4), {"t": 4, "H": 8, "F": 32}), ((2, 4), {"t": 4, "H": 12, "F": 16}),
           ((4, 2), {"t": 2, "H": 8, "F": 12}), ((4, 2), {"t": 2, "H": 16, "F": 6})),
    collectives=_collectives, diagnose=_diagnose,
    unavailable=(*LAYERS, *ZERO),
    hint="Sum the gradient over 'data' into the rows this replica owns (and make it a mean), "
         "update those rows and their momentum, then give every replica all the rows.",
    praise=_praise, rtol=1e-4, atol=1e-5)


@checker("A ZeRO step on a data × tensor mesh")
def check_grid_zero_step(fn) -> str:
    """``fn(w, m, g)`` per device on a data d × tensor t mesh (2 × 4 and 4 × 2, two sizes
    each): ``w[H, F/t]`` this device's tensor shard of the parameter, whole on every data
    replica; ``m[H/d, F/t]`` the momentum of the rows data replica r owns (rows r·H/d …);
    ``g[H, F/t]`` this replica's gradient. Returns ``(w, m)`` after one step of SGD with
    momentum (``LR`` = 0.1, ``BETA`` = 0.9: m ← β·m + ḡ, w ← w − lr·m) on the mean ḡ of the
    d replicas' gradients. The compiled step: one reduce-scatter of g and one all-gather of
    the updated rows, both over data."""
    return harness.grade(fn, GRID_ZERO)
