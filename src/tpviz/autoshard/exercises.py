"""Checkers for the automatic-parallelization chapter, easy to hard."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.autoshard.compare import (
    data_parallel,
    greedy,
    ilp_with_edge_rows,
    megatron,
    switch_batch,
)
from tpviz.autoshard.graph import Graph, mlp
from tpviz.autoshard.solve import solve
from tpviz.autoshard.stages import stages
from tpviz.autoshard.strategies import reshard
from tpviz.core.exercises import (
    NotAttempted,
    Wrong,
    as_number,
    call,
    checker,
    expect_bytes,
    expect_number,
    is_stub,
)
from tpviz.core.notation import parse
from tpviz.core.validate import mesh_shape as mesh_shape_of
from tpviz.errors import NotationError, TpvizError

SYSTEM = "H100 (NVLink)"
# 12.1: not the edge the chapter's resharding cell prints (float32 [1024, 4096] on 8 devices)
EDGE = dict(shape=(2048, 1024), src="A[B_X, H]", dst="A[B, H]", mesh={"X": 4})


@checker("Resharding one edge")
def check_edge_bytes(sent: float) -> str:
    """Bytes each device sends to turn ``A[B_X, H]`` (float32 [2048, 1024]) into ``A[B, H]`` on
    4 devices (forward pass only)."""
    c = reshard(EDGE["shape"], parse(EDGE["src"]).spec, parse(EDGE["dst"]).spec, EDGE["mesh"])
    whole, n = math.prod(EDGE["shape"]) * 4, EDGE["mesh"]["X"]
    if isinstance(sent, int | float) and math.isclose(sent, whole):
        raise Wrong(f"that is the whole array V; each device already holds 1/{n} of it and "
                    f"receives the other {n - 1}/{n}.",
                    "Ring all-gather: each device sends (n-1)/n · V.")
    if isinstance(sent, int | float) and math.isclose(sent, whole / n):
        raise Wrong("that is one device's block, not what it sends in a ring all-gather.",
                    "Ring all-gather: each device sends (n-1)/n · V.")
    if isinstance(sent, int | float) and math.isclose(sent, 2 * c.sent_bytes()):
        raise Wrong("that is an all-reduce's traffic; here nothing is summed, only gathered.")
    expect_bytes(sent, c.sent_bytes(), what="bytes sent per device",
                  hint="Which collective turns rows split over X into whole rows?")
    return f"An all-gather: {c.sent_bytes():,.0f} bytes per device."


# 12.2: a batch four times the FFN width (the chapter prints the strategies at B = 1,024)
GELU = dict(batch=16384, hidden=1024, ffn=4096, mesh={"X": 8})


@checker("The strategy of an element-wise op")
def check_gelu_layout(notation: str) -> str:
    """The layout the solver gives ``gelu.1`` of ``auto.mlp(16384, 1024, 4096)`` on {X: 8}."""
    if is_stub(notation):
        raise NotAttempted
    if not isinstance(notation, str):
        raise Wrong(f"give a string in the book's notation, not a {type(notation).__name__}.")
    try:
        parsed = parse(notation)
    except NotationError as e:
        raise Wrong(f"cannot read {notation!r}: {e}", "Write it like 'A[B_X, F]'.") from None
    got = parsed.spec
    if parsed.name not in ("A", "Tmp"):
        raise Wrong(f"{parsed.name} names another array; the gelu's is the MLP's hidden "
                    "activation.", "Use the book's name for it, or the generic A.")
    g = GELU
    s = solve(mlp(g["batch"], g["hidden"], g["ffn"]), g["mesh"], SYSTEM).choice["gelu.1"]
    if got == s.out_spec and tuple(parsed.dims) != ("B", "F"):
        raise Wrong(f"the layout is right, but the gelu's array is [B, F] (it follows the first "
                    f"matmul, F = {g['ffn']:,} wide), not [{', '.join(parsed.dims)}].",
                    "Name the dimensions after the array's real shape.")
    if got == s.out_spec:
        return ("At B = 16,384 > F the solver runs data parallelism: the gelu keeps the rows "
                "its matmul left split, with no communication around it.")
    if tuple(got) == (None, "X"):
        raise Wrong("that is the Megatron layout (columns split), the solver's choice for a "
                    "small batch.", "At B = 16,384 tokens and F = 4,096, which scheme does "
                    "the solver pick?")
    raise Wrong(f"{notation} is not the layout the gelu's input comes in.",
                "An element-wise op takes the layout its input already has.")


def _binary(n: int):
    return (np.array(bits, dtype=float) for bits in itertools.product((0, 1), repeat=n))


def _random_graphs():
    import random

    from tpviz.autoshard.graph import Builder

    rng = random.Random(7)
    for _ in range(3):
        b = Builder("bf16", x=(64, rng.choice([8, 16, 32])))
        names = ["x"]
        for i in range(5):
            src = rng.choice(names)
            if rng.random() < 0.6 and b.shapes[src][1] > 1:
                names.append(b.matmul(f"m{i}", src, rng.choice([8, 16, 64])))
            else:
                names.append(b.gelu(f"e{i}", src))
        yield b.graph()


@checker("The ILP's edge constraints")
def check_edge_constraints(edge_constraints) -> str:
    """``edge_constraints(n_u, n_v) -> (A, lower, upper)`` over ``[s_u, s_v, e]`` (``e``
    row-major ``n_u × n_v``): for one-hot ``s_u, s_v`` exactly one binary ``e`` may satisfy
    ``lower ≤ A @ [s_u, s_v, e] ≤ upper``: the one with ``e[a, a'] = s_u[a] · s_v[a']``. First
    the constraints go into the whole ILP of three random graphs, solved against brute
    force; then every one-hot pair is enumerated."""
    from tpviz.autoshard.solve import brute_force, problem
    from tpviz.core.cost import System

    slow = System("slow link", flops=2e11, bandwidth=1e10, source="", latency=2e-6)
    for k, graph in enumerate(_random_graphs()):
        try:
            got = ilp_with_edge_rows(lambda nu, nv: call(
                edge_constraints, nu, nv, what="edge_constraints"), problem(graph, {"X": 4}, slow))
        except (TypeError, ValueError, IndexError):
            raise Wrong("return (A, lower, upper): A with n_u + n_v + n_u·n_v columns, lower "
                        "and upper one entry per row of A.") from None
        best = brute_force(graph, {"X": 4}, slow).cost
        if got is None:
            raise Wrong(f"in the ILP of random graph {k}, your constraints leave no choice at "
                        "all: they exclude the pair that the chosen strategies make.")
        if got < best * (1 - 1e-6):
            raise Wrong(f"in the ILP of random graph {k}, the solver reports a step of "
                        f"{got:.4g} s, below the best possible {best:.4g} s (brute force): your "
                        "constraints let e avoid paying the resharding of the pair chosen.",
                        "e[a, a'] must be 1 where both s_u[a] and s_v[a'] are 1.")
        if got > best * (1 + 1e-6):
            raise Wrong(f"in the ILP of random graph {k} the solver finds {got:.4g} s, above "
                        f"the optimum {best:.4g} s: your constraints forbid some pairs.")
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
                            "e[a, a'] = 1 must be allowed when both strategies are chosen.")
            if any(not np.array_equal(e, want) for e in ok):
                wrong = next(e for e in ok if not np.array_equal(e, want))
                raise Wrong(f"with s_u = strategy {i} and s_v = strategy {j}, your constraints "
                            f"also allow e = {wrong.astype(int).tolist()}.",
                            "e must be one-hot, and its 1 must sit where s_u and s_v are 1.")
    return "e is forced to s_u ⊗ s_v: the quadratic edge term becomes linear."


@checker("Bytes of a matmul strategy in a training step")
def check_column_parallel_bytes(sent: float) -> str:
    """Bytes each device sends in one training step for ``In[B, H] · W[H, F_X]`` with B = 1024,
    H = 4096, F = 16384, float32, on 8 devices."""
    from tpviz.autoshard.graph import Builder
    from tpviz.autoshard.strategies import strategies

    b = Builder(x=(1024, 4096))
    b.matmul("w", "x", 16384)
    s = next(s for s in strategies(b.graph().ops[0], {"X": 8})
             if s.weight_spec == P(None, "X") and s.in_specs[0] == P(None, None))
    want = sum(c.sent_bytes for c in s.forward + s.backward)
    v = 1024 * 4096 * 4
    if isinstance(sent, int | float) and math.isclose(sent, 0):
        raise Wrong("the forward pass sends nothing, but the backward pass does.",
                    "dIn = dOut · Wᵀ contracts F, which is split.")
    if isinstance(sent, int | float) and math.isclose(sent, 2 * 7 / 8 * 1024 * 16384 * 4):
        raise Wrong("that all-reduces something of shape [B, F]; which result is a partial sum?")
    if isinstance(sent, int | float) and math.isclose(sent, v):
        raise Wrong("that is V, the array; a ring all-reduce sends 2 (n-1)/n · V per device.")
    expect_bytes(sent, want, what="bytes per device", hint="One all-reduce of dIn [B, H].")
    return "One all-reduce of dIn: Megatron's f in the backward pass."


# 12.6: GPT-2 large's MLP (the chapter finds the switch for GPT-2 small's, H = 768)
SWITCH = dict(hidden=1280, ffn=5120, devices=8)


@functools.lru_cache(maxsize=1)
def _switch_point() -> int:
    """B* for :data:`SWITCH`: the solver's switch, stepped down by N while the plans tie."""
    d, mesh = SWITCH, {"X": SWITCH["devices"]}
    got, n = switch_batch(d["hidden"], d["ffn"], mesh, SYSTEM), d["devices"]
    while got > n:
        dp, mt = (plan(mlp(got - n, d["hidden"], d["ffn"]), mesh, SYSTEM).cost
                  for plan in (data_parallel, megatron))
        if dp > mt * (1 + 1e-9):
            break
        got -= n
    return got


@checker("Where the solver switches to data parallelism")
def check_switch_batch(batch) -> str:
    """The smallest batch (tokens) B* at which data parallelism costs no more than Megatron for
    the MLP with H = 1280, F = 5120 on 8 devices, on a grid of N tokens. The two tie there
    (B* = F); above it data parallelism is cheaper. Only that point is accepted."""
    got = as_number(batch, "B*")
    if got <= 0:  # before the solver's bisection
        raise Wrong(f"B* = {got:g} is not a batch; it is a positive number of tokens.")
    switch, n = _switch_point(), SWITCH["devices"]
    hint = "Set Megatron's 2·B·H (activations) equal to data parallelism's 2·H·F (weights)."
    if got < switch:
        raise Wrong(f"at B = {got:,.0f} the solver still picks Megatron; B* is larger.", hint)
    if got > switch + n:
        raise Wrong(f"at B = {got:,.0f} the solver already uses data parallelism; B* is "
                    "smaller.", hint)
    if got != switch:
        raise Wrong(f"B = {got:,.0f} is close, but not where the two schemes cost the same.",
                    "Derive B* from the two traffic formulas rather than by trying values.")
    return (f"B* = F = {switch:,} tokens: there the two cost the same; below it Megatron is "
            "cheaper, above it data parallelism.")


@checker("The best pipeline stages")
def check_stages(latency: float) -> str:
    """The least ``Σ_s t_s + (m − 1) · max_s t_s`` for layers costing [1, 2, 6, 2] seconds on one
    device, 4 devices, m = 8 microbatches, stages on 1 or 2 devices."""
    costs = [1, 2, 6, 2]
    best = stages(costs, 4, 8, [(1,), (2,)])
    for p, what in ((4, "four single-device stages"), (2, "two stages of 2 devices")):
        other = stages(costs, 4, 8, [(4 // p,)])
        if isinstance(latency, int | float) and math.isclose(latency, other.latency) and (
                not math.isclose(other.latency, best.latency)):
            raise Wrong(f"{latency} is the best with {what} only; mix stage sizes.",
                        "A stage of 2 devices halves its time; give them to the slow layer.")
    m, n = 8, 4
    value = latency if isinstance(latency, int | float) else None
    if value is not None and math.isclose(value, m * sum(costs) / n):
        raise Wrong("that is m · Σt / N: all the work spread evenly over the devices, with no "
                    "fill or drain; no pipeline reaches it.",
                    "The first microbatch passes every stage: Σ_s t_s + (m − 1) · max_s t_s.")
    even = sum(costs) / n  # N single-device stages of exactly Σt/N each
    if value is not None and math.isclose(value, n * even + (m - 1) * even):
        raise Wrong("that is the latency of perfectly even single-device stages (Σt/N each); "
                    "no split of these layers is even, and a 2-device stage can do better.",
                    "A stage of 2 devices halves its time; give them to the slow layer.")
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
        shape = mesh_shape_of("mesh_shape", mesh_shape)
    except TpvizError as e:
        raise Wrong(f"the mesh shape: {e}") from None
    if not 1 <= len(shape) <= 3 or math.prod(shape.values()) > 64:
        raise Wrong(f"the mesh {shape} has {len(shape)} axes and {math.prod(shape.values())} "
                    "devices; use 1 to 3 axes and at most 64 devices (more makes the checker "
                    "slow without making the point clearer).")
    try:
        best, first = solve(graph, shape, SYSTEM), greedy(graph, shape, SYSTEM)
    except TpvizError as e:
        raise Wrong(f"the graph cannot be solved on this mesh: {e}") from None
    ratio = first.cost / best.cost
    if ratio < 1.05:
        raise Wrong(f"greedy is within {100 * (ratio - 1):.1f} % of the optimum here.",
                    "Make an early op cheap with a layout that a later, expensive op hates.")
    return f"Greedy costs {ratio:.2f}× the ILP's optimum."
