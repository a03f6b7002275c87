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
    """One reduce-scatter of g over data, one all-to-all of its halves, or permutes over data
    that send half of g per device (a ring of two); nothing else."""
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
    if kinds == {"all-to-all"}:  # the halves exchanged: half of g sent, as a reduce-scatter
        if len(found) != 1 or found[0][0].full_bytes != v:
            return (f"{len(found)} all-to-all(s) of {found[0][0].full_bytes:,} bytes: one "
                    f"exchange of the {v:,}-byte gradient's halves does it")
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
    One reduce-scatter over data (or one all-to-all of g's halves, or permutes over data sending
    half of g), and nothing else."""
    return harness.grade(fn, GRID_SCATTER)


# --- 11.6: the block's forward and its data-parallel weight gradients -------------------------

def _step_reference(x, w1, w2):
    """One device's y and dL/dW1, dL/dW2, by hand in float64 (jax.grad op by op costs a second
    per shape): gelu is JAX's default, the tanh form."""
    x, w1, w2 = (np.asarray(a, np.float64) for a in (x, w1, w2))
    z = x @ w1
    u = np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3))
    h = 0.5 * z * (1 + u)
    y = h @ w2
    dy = y / x.shape[0]
    dz = (dy @ w2.T) * (0.5 * (1 + u) + 0.5 * z * (1 - u * u) * np.sqrt(2 / np.pi)
                        * (1 + 3 * 0.044715 * z * z))
    return tuple(a.astype(np.float32) for a in (y, x.T @ dz, h.T @ dy))


def _step_diagnose(case, got, want) -> str | None:
    if not isinstance(got, tuple | list) or len(got) != 3:
        return None
    d = case.size("data")
    x, w1, w2 = case.args
    rows = x.shape[0] // d
    for name, g, w in zip(("dW1", "dW2"), got[1:], want[1:], strict=True):
        g, w = np.asarray(g), np.asarray(w)
        for r in range(d):  # one replica's tokens only: the data replicas' sum is missing
            own = _step_reference(x[r * rows:(r + 1) * rows], w1, w2)[1 + (name == "dW2")]
            own = own * rows / x.shape[0]
            if g.shape == w.shape and np.allclose(g, own, rtol=1e-4, atol=1e-6):
                return (f"{name} holds only data replica {r}'s share, from its own B/{d} "
                        "tokens: the replicas saw different tokens, and the gradient adds "
                        "theirs")
    for name, g, w in zip(("dW1", "dW2"), got[1:], want[1:], strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or np.allclose(g, w, rtol=1e-4, atol=1e-6):
            continue
        k = float((g * w).sum() / (w * w).sum())
        if not np.allclose(g, k * w, rtol=1e-4, atol=1e-6):
            continue
        if np.isclose(k, d):
            return (f"{name} is {d} times too large: the loss's mean taken over this shard's "
                    f"B/{d} tokens, not the whole batch of B, or its gradient added over "
                    "'data' twice (with check_vma=True, jax.grad already adds the gradient of "
                    "a weight held alike on every data replica)")
        if np.isclose(k, 1 / d):
            return (f"{name} is {d} times too small: averaged over the data replicas as well "
                    f"as over the batch, or B counted as more than this mesh's {d} data shards "
                    f"of B/{d} tokens (read d from the mesh)")
        return (f"{name} is {k:.3g} times the right value: check the loss's 1/B (B the whole "
                f"batch, {d} data shards of B/{d} tokens: read the count from the mesh) and "
                "the axes each gradient is summed over")
    return None


def _step_collectives(case, found) -> str | None:
    """One all-reduce of y's shard over tensor; dW1's and dW2's shards all-reduced over data,
    in two all-reduces or one (the compiler may combine them): 2·H·F/t·4 bytes; nothing else."""
    s, d, t = case.sizes, case.size("data"), case.size("tensor")
    y, v = s["B"] // d * s["H"] * 4, 2 * s["H"] * s["F"] // t * 4
    by = {}
    for c, axes in found:
        by.setdefault((c.kind, tuple(axes or ())), []).append(c.full_bytes)
    other = [k for k in by if k not in {("all-reduce", ("tensor",)), ("all-reduce", ("data",))}]
    if other:
        kind, axes = other[0]
        return (f"{kind} along {axes}: the block's step needs only all-reduces, of y over "
                "'tensor' and of the weight gradients over 'data'")
    if by.get(("all-reduce", ("tensor",))) != [y]:
        got = by.get(("all-reduce", ("tensor",)), [])
        return (f"{len(got)} all-reduce(s) over 'tensor' of {sum(got):,} bytes: the forward "
                f"needs one, of this data shard's y ({y:,} bytes), and the backward none")
    got = by.get(("all-reduce", ("data",)), [])
    if sum(got) != v or len(got) > 2:
        return (f"{len(got)} all-reduce(s) over 'data' of {sum(got):,} bytes in all: the data "
                f"replicas add dW1's and dW2's shards, {v:,} bytes, once")
    return None


GRID_STEP = harness.Build(
    what="your block's step",
    layouts=("In[B_{data}, H]", "W1[H, F_{tensor}]", "W2[F_{tensor}, H]"),
    out=("Out[B_{data}, H]", "G1[H, F_{tensor}]", "G2[F_{tensor}, H]"),
    out_names=("y", "dW1", "dW2"), axes=GRID, inputs=_mlp_inputs, reference=_step_reference,
    cases=(((2, 4), {"B": 8, "H": 8, "F": 32}), ((2, 4), {"B": 12, "H": 12, "F": 16}),
           ((4, 2), {"B": 8, "H": 8, "F": 32}), ((4, 2), {"B": 16, "H": 4, "F": 24})),
    extra=_step_collectives, diagnose=_step_diagnose, vma="either",
    unavailable=(*LAYERS, "tpviz.together.run._loss", "tpviz.together.run.reference_loss",
                 "tpviz.zero.run.step_fn"),
    hint="Forward: the tensor group adds its shares of y. Backward: dL/dy is whole on every "
         "tensor device, so each one's weight shards get their gradient without communication; "
         "only the data replicas, which saw other tokens, must add theirs.",
    praise="Megatron's g on the tensor axis (its f all-reduces dL/dx, not asked for here), data "
           "parallelism's all-reduce on the data axis.", rtol=1e-4, atol=1e-6)


@checker("The MLP block's step on a data × tensor mesh")
def check_grid_mlp_step(fn) -> str:
    """``fn(x, w1, w2)`` per device on a data × tensor mesh (2 × 4 and 4 × 2, two sizes each),
    held as in :func:`check_grid_mlp`: returns ``(y, dW1, dW2)``: y for its data shard, whole on
    the tensor group, and its shards ``dW1[H, F/t]``, ``dW2[F/t, H]`` of the gradient of
    L = ||y||² / (2B) over the whole batch of B tokens, the same on every data replica. The
    compiled program: one all-reduce of the shard's y over tensor and two all-reduces of the
    weight shards' gradients over data, nothing else."""
    return harness.grade(fn, GRID_STEP)
