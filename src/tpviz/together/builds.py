"""Chapter 11's build checkers on a data × tensor mesh, on :mod:`tpviz.core.harness`: the MLP
block with its weights split over ``tensor`` and its batch over ``data`` (11.6), and ZeRO's
gradient reduction over ``data`` (11.7), which a reduce-scatter or a ring of permutes may do."""

from __future__ import annotations

import jax
import numpy as np

from tpviz.core import harness
from tpviz.core.exercises import checker
from tpviz.megatron.exercises import LAYERS as MEGATRON

GRID = ("data", "tensor")
# Megatron's layers (chapter 4) and the chapter's 3D program: each computes the block for you
LAYERS = (*MEGATRON, "tpviz.together.run.train_step", "tpviz.together.run._stage")


def _mlp_inputs(s: dict, rng) -> tuple:
    b, h, f = s["B"], s["H"], s["F"]
    return (rng.standard_normal((b, h), dtype=np.float32),
            (rng.standard_normal((h, f)) / np.sqrt(h)).astype(np.float32),
            (rng.standard_normal((f, h)) / np.sqrt(f)).astype(np.float32))


def _summed_over_data(case, got, want) -> str | None:
    d = case.size("data")
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return None
    rows = want.shape[0] // d
    every = np.tile(want.reshape(d, rows, -1).sum(0), (d, 1))
    if np.allclose(got, every, rtol=1e-4, atol=1e-5) and not np.allclose(got, want, rtol=1e-4,
                                                                         atol=1e-5):
        return ("each data shard's y has the other shards' added: the sum also ran over the "
                "data axis, whose devices hold other tokens.")
    return None


GRID_MLP = harness.Build(
    what="your block", layouts=("In[B_{data}, H]", "W1[H, F_{tensor}]", "W2[F_{tensor}, H]"),
    out="Out[B_{data}, H]", axes=GRID, inputs=_mlp_inputs,
    reference=lambda x, w1, w2: np.asarray(jax.nn.gelu(x @ w1) @ w2),
    cases=(((2, 4), {"B": 8, "H": 8, "F": 32}), ((2, 4), {"B": 6, "H": 12, "F": 16}),
           ((4, 2), {"B": 8, "H": 8, "F": 32})),
    collectives=lambda case: [harness.Expect(
        "all-reduce", case.sizes["B"] // case.size("data") * case.sizes["H"] * 4, ("tensor",),
        what="this data shard's y")],
    diagnose=_summed_over_data, unavailable=LAYERS,
    hint="Each tensor device holds a partial sum of y for its data shard: add them over the "
         "devices that hold that shard, and only those.",
    praise="Megatron's g on the tensor axis, nothing on the data axis.", rtol=1e-4, atol=1e-5)


@checker("The MLP block on a data × tensor mesh")
def check_grid_mlp(fn) -> str:
    """``fn(x, w1, w2)`` per device inside ``shard_map`` on a data × tensor mesh (2 × 4 and
    4 × 2), with ``x[B/d, H]`` split over data, ``w1[H, F/t]`` by columns and ``w2[F/t, H]`` by
    rows over tensor: returns ``y = gelu(x·W1)·W2`` for its data shard, whole on every tensor
    device; the compiled program holds exactly one all-reduce of the shard's y over tensor."""
    return harness.grade(fn, GRID_MLP)


def _gradient_inputs(s: dict, rng) -> tuple:
    d, h, f = 2, s["H"], s["F"]
    return (rng.standard_normal((d * h, f), dtype=np.float32),)  # replica r's gradient: block r


def _gradient_reference(g, case):
    g = np.asarray(g)
    return g.reshape(2, -1, g.shape[1]).sum(0)  # [H, F]: replica r keeps rows r·H/2 …


def _reduced(case, found) -> str | None:
    """One reduce-scatter of g over data, or permutes over data that send half of g per device
    (a ring of two); nothing else."""
    v = case.sizes["H"] * case.sizes["F"] // case.size("tensor") * 4  # g[H, F/t], float32
    kinds = {c.kind for c, _ in found}
    off = [(c.kind, axes) for c, axes in found if tuple(axes or ()) != ("data",)]
    if off:
        return f"a {off[0][0]} along {off[0][1]}: the data replicas differ only along 'data'"
    if kinds == {"reduce-scatter"}:
        if len(found) != 1 or found[0][0].full_bytes != v:
            return (f"{len(found)} reduce-scatter(s) of {found[0][0].full_bytes:,} bytes: one of "
                    f"the {v:,}-byte gradient does it")
        return None
    if kinds == {"collective-permute"}:
        sent = sum(c.bytes for c, _ in found)
        if sent != v // 2:
            return (f"the permutes send {sent:,} bytes per device; each replica needs to send "
                    f"only the half of g the other one keeps, {v // 2:,} bytes")
        return None
    if "all-reduce" in kinds:
        return ("the program all-reduces the whole gradient and then keeps half: twice the "
                "bytes it needs")
    return (f"{', '.join(sorted(kinds))}: the reduction needs one reduce-scatter (or the "
            "permutes of a ring)")


GRID_SCATTER = harness.Build(
    what="your reduction", layouts=("G[R_{data}, F_{tensor}]",), out="G[H_{data}, F_{tensor}]",
    axes=GRID, inputs=_gradient_inputs, reference=_gradient_reference,
    cases=(((2, 4), {"H": 8, "F": 32}), ((2, 4), {"H": 6, "F": 16}),
           ((2, 2), {"H": 8, "F": 12})),
    extra=_reduced, unavailable=(*LAYERS, "tpviz.zero.run.step_fn"),
    hint="Each data replica needs the sum of both replicas' gradients, but only for the rows "
         "it updates.",
    praise="ZeRO's reduction: each replica receives only what it updates.", rtol=1e-5,
    atol=1e-5)


@checker("ZeRO's gradient reduce-scatter on the data axis")
def check_grid_reduce_scatter(fn) -> str:
    """``fn(g)`` per device on a data 2 × tensor t mesh (t = 4 and 2): ``g[H, F/t]`` is this
    device's gradient of its W1 shard from its own data shard; returns the rows [H/2, F/t] it
    owns under ZeRO over data (data index 0 the first half), summed over the two replicas.
    One reduce-scatter over data, or permutes over data sending half of g, and nothing else."""
    return harness.grade(fn, GRID_SCATTER)
