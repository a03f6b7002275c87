"""Checkers for the automatic-parallelization chapter, easy to hard."""

from __future__ import annotations

import itertools
import math

import numpy as np

from tpviz.autoshard.compare import greedy, is_data_parallel, is_megatron
from tpviz.autoshard.graph import Graph, mlp
from tpviz.autoshard.solve import solve
from tpviz.autoshard.stages import stages
from tpviz.autoshard.strategies import reshard
from tpviz.core.exercises import NotAttempted, Wrong, call, checker, expect_number, is_stub
from tpviz.core.notation import parse
from tpviz.errors import NotationError, TpvizError

SYSTEM = "H100 (NVLink)"
EDGE = dict(shape=(1024, 4096), src="A[B_X, H]", dst="A[B, H]", mesh={"X": 8})


@checker("Resharding one edge")
def check_edge_bytes(sent: float) -> str:
    """Bytes each device sends to turn ``A[B_X, H]`` (float32 [1024, 4096]) into ``A[B, H]`` on
    8 devices (forward pass only)."""
    c = reshard(EDGE["shape"], parse(EDGE["src"]).spec, parse(EDGE["dst"]).spec, EDGE["mesh"])
    whole = math.prod(EDGE["shape"]) * 4
    if isinstance(sent, int | float) and math.isclose(sent, whole):
        raise Wrong("that is the whole array V; each device already holds 1/8 of it and "
                    "receives the other 7/8.", "Ring all-gather: each device sends (n-1)/n · V.")
    if isinstance(sent, int | float) and math.isclose(sent, whole / 8):
        raise Wrong("that is one device's block, not what it sends in a ring all-gather.",
                    "Ring all-gather: each device sends (n-1)/n · V.")
    if isinstance(sent, int | float) and math.isclose(sent, 2 * c.sent_bytes()):
        raise Wrong("that is an all-reduce's traffic; here nothing is summed, only gathered.")
    expect_number(sent, c.sent_bytes(), what="bytes sent per device",
                  hint="Which collective turns rows split over X into whole rows?")
    return f"An all-gather: {c.sent_bytes():,.0f} bytes per device."


@checker("The strategy of an element-wise op")
def check_gelu_layout(notation: str) -> str:
    """The layout of the gelu between a column-parallel and a row-parallel matmul on {X: 8}."""
    if is_stub(notation):
        raise NotAttempted
    try:
        got = parse(notation).spec
    except NotationError as e:
        raise Wrong(f"cannot read {notation!r}: {e}", "Write it like 'A[B_X, H]'.") from None
    s = solve(mlp(1024, 8192, 32768), {"X": 8}, SYSTEM).choice["gelu.1"]
    if got == s.out_spec:
        return "It follows its input: columns split, so no communication around it."
    if tuple(got) and got[0] == "X":
        raise Wrong("rows split over X would need an all-to-all on both sides of the gelu.",
                    "What layout does the column-parallel matmul leave?")
    raise Wrong(f"{notation} is not the layout the column-parallel matmul leaves.",
                "An element-wise op takes the layout its input already has.")


def _binary(n: int):
    return (np.array(bits, dtype=float) for bits in itertools.product((0, 1), repeat=n))


@checker("The ILP's edge constraints")
def check_edge_constraints(edge_constraints) -> str:
    """``edge_constraints(n_u, n_v) -> (A, lower, upper)`` over ``[s_u, s_v, e]`` (``e``
    row-major ``n_u × n_v``): for one-hot ``s_u, s_v`` exactly one binary ``e`` may satisfy
    ``lower ≤ A @ [s_u, s_v, e] ≤ upper``: the one with ``e[i, j] = s_u[i] · s_v[j]``."""
    for nu, nv in ((2, 2), (2, 3)):
        out = call(edge_constraints, nu, nv, what="edge_constraints")
        try:
            a, lo, hi = (np.asarray(x, dtype=float) for x in out)
        except (TypeError, ValueError):
            raise Wrong("return a tuple (A, lower, upper) of arrays.") from None
        if a.ndim != 2 or a.shape[1] != nu + nv + nu * nv or lo.shape != (a.shape[0],) or (
                hi.shape != (a.shape[0],)):
            raise Wrong(f"for n_u={nu}, n_v={nv}, A needs {nu + nv + nu * nv} columns ([s_u, "
                        "s_v, e]) and lower/upper one entry per row of A.")
        for i, j in itertools.product(range(nu), range(nv)):
            su, sv = np.eye(nu)[i], np.eye(nv)[j]
            ok = [e for e in _binary(nu * nv) if np.all(lo - 1e-9 <= a @ np.concatenate(
                [su, sv, e])) and np.all(a @ np.concatenate([su, sv, e]) <= hi + 1e-9)]
            want = np.outer(su, sv).ravel()
            if not ok:
                raise Wrong(f"with s_u = strategy {i} and s_v = strategy {j}, no e satisfies "
                            "your constraints, not even the right one.",
                            "e[i, j] = 1 must be allowed when both strategies are chosen.")
            if any(not np.array_equal(e, want) for e in ok):
                wrong = next(e for e in ok if not np.array_equal(e, want))
                raise Wrong(f"with s_u = strategy {i} and s_v = strategy {j}, your constraints "
                            f"also allow e = {wrong.astype(int).tolist()}.",
                            "e must be one-hot, and its 1 must sit where s_u and s_v are 1.")
    return "e is forced to s_u ⊗ s_v: the quadratic edge term becomes linear."


@checker("Bytes of a matmul strategy in a training step")
def check_column_parallel_bytes(sent: float) -> str:
    """Bytes each device sends in one training step for ``X[B, D] · W[D, F_X]`` with B = 1024,
    D = 4096, F = 16384, float32, on 8 devices."""
    from tpviz.autoshard.graph import Builder
    from tpviz.autoshard.strategies import strategies

    b = Builder(x=(1024, 4096))
    b.matmul("w", "x", 16384)
    s = next(s for s in strategies(b.graph().ops[0], {"X": 8})
             if s.notation == "X[B, D] · W[D, F_X]")
    want = sum(c.sent_bytes for c in s.forward + s.backward)
    v = 1024 * 4096 * 4
    if isinstance(sent, int | float) and math.isclose(sent, 0):
        raise Wrong("the forward pass sends nothing, but the backward pass does.",
                    "dX = dY · Wᵀ contracts F, which is split.")
    if isinstance(sent, int | float) and math.isclose(sent, 2 * 7 / 8 * 1024 * 16384 * 4):
        raise Wrong("that all-reduces something of shape [B, F]; which result is a partial sum?")
    if isinstance(sent, int | float) and math.isclose(sent, v):
        raise Wrong("that is V, the array; a ring all-reduce sends 2 (n-1)/n · V per device.")
    expect_number(sent, want, what="bytes per device", hint="One all-reduce of dX [B, D].")
    return "One all-reduce of dX: Megatron's f in the backward pass."


@checker("Where the solver switches to data parallelism")
def check_switch_batch(batch: int) -> str:
    """The batch (tokens) B* at which data parallelism starts to beat Megatron for the MLP with
    H = 768, F = 3072 on 8 devices: checked against the solver just below and just above."""
    expect_number(batch, batch if isinstance(batch, int | float) else 0.0)
    h, f, n = 768, 3072, 8
    below, above = int(batch * 0.9) // n * n, -(-int(batch * 1.1) // n) * n
    if below < n:
        raise Wrong(f"B* = {batch} is too small to hold one row per device.")
    lo = solve(mlp(below, h, f), {"X": n}, SYSTEM)
    hi = solve(mlp(above, h, f), {"X": n}, SYSTEM)
    if not is_megatron(lo):
        raise Wrong(f"at B = {below} the solver already uses data parallelism; B* is smaller.",
                    "Compare the bytes of Megatron's two all-reduces of [B, H] with data "
                    "parallelism's all-reduce of the weight gradients.")
    if not is_data_parallel(hi):
        raise Wrong(f"at B = {above} the solver still picks Megatron; B* is larger.",
                    "Set 2·B·H (activations) equal to 2·H·F (weights) and solve for B.")
    return f"Below {batch:,} tokens Megatron, above it data parallelism: B* = F."


@checker("The best pipeline stages")
def check_stages(latency: float) -> str:
    """The least ``Σ t_i + (B − 1) · max t_i`` for layers costing [1, 2, 6, 2] seconds on one
    device, 4 devices, B = 8 microbatches, stages on 1 or 2 devices."""
    costs = [1, 2, 6, 2]
    best = stages(costs, 4, 8, [(1,), (2,)])
    for p, what in ((4, "four single-device stages"), (2, "two stages of 2 devices")):
        other = stages(costs, 4, 8, [(4 // p,)])
        if isinstance(latency, int | float) and math.isclose(latency, other.latency) and (
                not math.isclose(other.latency, best.latency)):
            raise Wrong(f"{latency} is the best with {what} only; mix stage sizes.",
                        "A stage of 2 devices halves its time; give them to the slow layer.")
    if isinstance(latency, int | float) and math.isclose(latency, sum(costs) / 4 * 8):
        raise Wrong("that assumes perfectly even stages; no split of these layers is even.",
                    "The slowest stage sets the pace; the first microbatch passes all stages.")
    expect_number(latency, best.latency, what="the latency",
                  hint="Try stages of 1 and 2 devices; the slowest stage sets the pace.")
    return f"Stages {best.bounds} on {[math.prod(s) for s in best.submeshes]} devices."


@checker("A graph where greedy loses")
def check_greedy_trap(design) -> str:
    """``design() -> (graph, mesh_shape)``: a graph (≤ 8 ops) and a mesh on which choosing each
    op's cheapest strategy in order (:func:`tpviz.autoshard.greedy`) costs at least 5 % more
    than the ILP's optimum."""
    out = call(design, what="your design function")
    if not isinstance(out, tuple) or len(out) != 2:
        raise Wrong("return a pair (graph, mesh_shape).")
    graph, mesh_shape = out
    if not isinstance(graph, Graph):
        raise Wrong(f"give a Graph (tpviz.autoshard.Builder(...).graph() or mlp(...)), not a "
                    f"{type(graph).__name__}.")
    if len(graph) > 8:
        raise Wrong(f"{len(graph)} ops; keep it to at most 8 so it is easy to explain.")
    try:
        best, first = solve(graph, mesh_shape, SYSTEM), greedy(graph, mesh_shape, SYSTEM)
    except TpvizError as e:
        raise Wrong(f"the graph cannot be solved on this mesh: {e}") from None
    ratio = first.cost / best.cost
    if ratio < 1.05:
        raise Wrong(f"greedy is within {100 * (ratio - 1):.1f} % of the optimum here.",
                    "Make an early op cheap with a layout that a later, expensive op hates.")
    return f"Greedy costs {ratio:.2f}× the ILP's optimum."
