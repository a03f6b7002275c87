"""The intra-op pass: one strategy per op, by integer linear programming (Alpa, §4.2).

With ``s_v`` the one-hot choice of op ``v``, ``c_v + d_v`` the compute and communication time
of each of its strategies and ``R_vu`` the resharding time of edge ``(v, u)`` for each pair of
strategies, Alpa minimises::

    Σ_v s_vᵀ (c_v + d_v)  +  Σ_(v,u) s_vᵀ R_vu s_u

The quadratic term is linearised with one variable per pair, ``e_vu[i, j] = s_v[i] · s_u[j]``:
``e_vu`` is one-hot over the pairs, its row sums equal ``s_v`` and its column sums ``s_u``.
Then ``s_vᵀ R_vu s_u = Σ R_vu[i, j] e_vu[i, j]`` is linear. With ``s`` binary these equalities
force ``e`` to the one pair chosen, so ``e`` may stay continuous in [0, 1]. A memory limit adds
``Σ_v m_vᵀ s_v ≤ M``. :func:`brute_force` tries every combination, for small graphs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from tpviz.autoshard.graph import Graph, Op
from tpviz.autoshard.strategies import GRADIENT_SYNC, Strategy, reshard, strategies
from tpviz.core import cost
from tpviz.core import validate as check
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import Bytes, Indices, MeshShape
from tpviz.errors import ArgumentError, ArgumentTypeError, ShardingError, SolverError


def system_of(system) -> cost.System:
    """A :class:`tpviz.core.cost.System`, or the name of one in ``cost.SYSTEMS``. The solver's
    cost model, like Alpa's, prices bytes: a named preset comes with every latency 0 (α, the
    network's α and NCCL's base latency; pass a ``System`` with a latency to include it).

    Raises:
        ArgumentTypeError: neither a name nor a System.
        ArgumentError: a name that is not in ``cost.SYSTEMS``.
    """
    if isinstance(system, cost.System):
        return system
    return replace(cost.system(system), latency=0.0, base_latency=0.0, network_latency=0.0)


def _mesh(mesh_shape) -> dict[str, int]:
    shape = check.mesh_shape("mesh_shape", mesh_shape)
    if not shape:
        raise ArgumentError("mesh_shape has no axes; give at least one, e.g. {'X': 8}.")
    return shape


@dataclass(frozen=True)
class Problem:
    """Every op's strategies and the cost tables of the ILP, in seconds per training step."""

    graph: Graph
    mesh_shape: dict[str, int]
    system: cost.System
    ops: tuple[Op, ...]  # the graph's nodes: shared inputs, then its ops
    options: tuple[tuple[Strategy, ...], ...]  # per node
    node: tuple[np.ndarray, ...]  # per op: compute + communication of each strategy
    edges: tuple[tuple[int, int, int], ...]  # (producer, consumer, input position)
    edge: tuple[np.ndarray, ...]  # per edge: [producer strategy, consumer strategy]
    memory: tuple[np.ndarray, ...]  # per op: bytes per device of each strategy

    def _fits(self, choice) -> None:
        if len(choice) != len(self.options) or any(
                not 0 <= i < len(o) for i, o in zip(choice, self.options, strict=True)):
            raise ArgumentError(f"choice = {tuple(choice)} must give one strategy index per op "
                                f"({len(self.options)}), each below its op's number of "
                                f"strategies {tuple(map(len, self.options))}.")

    def time(self, collectives: Sequence[Collective]) -> float:  # on the system's network
        return sum(self.system.price(c).seconds for c in collectives)

    def cost(self, choice: Indices) -> float:
        """Seconds per step of one strategy index per op."""
        self._fits(choice)
        return float(sum(self.node[v][i] for v, i in enumerate(choice)) + sum(
            self.edge[k][choice[u], choice[v]] for k, (u, v, _) in enumerate(self.edges)))

    def bytes(self, choice: Indices) -> int:
        self._fits(choice)
        return int(sum(self.memory[v][i] for v, i in enumerate(choice)))


def problem(graph: Graph, mesh_shape: MeshShape, system: cost.System, microbatches: int = 1
            ) -> Problem:
    """Enumerate strategies and tabulate node and edge costs (no solving); with
    ``microbatches`` = m, a weight gradient's all-reduce costs 1/m (reduced once per m)."""
    if not isinstance(graph, Graph):
        raise ArgumentTypeError(f"graph must be a tpviz.autoshard Graph (from mlp(), "
                                f"transformer() or Builder), got {type(graph).__name__}.")
    mesh_shape, system = _mesh(mesh_shape), system_of(system)
    ops = graph.nodes
    options = tuple(tuple(strategies(op, mesh_shape, graph.dtype)) for op in ops)
    p = Problem(graph, mesh_shape, system, ops, options, (), tuple(graph.node_edges), (), ())
    m = check.integer("microbatches", microbatches)  # a dW all-reduce costs 1/m of its time
    node = tuple(np.array([s.flops / system.flops + p.time(s.forward) + sum(p.time([c]) / (
        m if c.what == GRADIENT_SYNC else 1) for c in s.backward) for s in o]) for o in options)
    memory = tuple(np.array([s.memory for s in o], dtype=float) for o in options)
    cache: dict = {}
    edge = []
    for u, v, k in p.edges:
        shape = ops[v].in_shapes[k]
        table = np.zeros((len(options[u]), len(options[v])))
        for i, a in enumerate(options[u]):
            for j, b in enumerate(options[v]):
                key = (shape, a.out_spec, b.in_specs[k])
                if key not in cache:
                    cache[key] = p.time(reshard(shape, a.out_spec, b.in_specs[k], mesh_shape,
                                                graph.dtype) + reshard(
                        shape, b.in_specs[k], a.out_spec, mesh_shape, graph.dtype))
                table[i, j] = cache[key]
        edge.append(table)
    return Problem(graph, mesh_shape, system, ops, options, node, p.edges, tuple(edge), memory)


@dataclass(frozen=True)
class Solution:
    """The chosen strategy of every op.

    Attributes:
        strategies: op name → its sharding in the book's notation (a graph input read by several
            ops is listed too: the layout it arrives in).
        cost: seconds per training step (compute + communication + resharding).
        collectives: the planned collectives of the forward pass, op by op, resharding included.
        backward: those of the backward pass.
        choice: op name → the chosen :class:`Strategy`.
        memory: bytes per device of the chosen strategies.
    """

    strategies: dict[str, str]
    cost: float
    collectives: Collectives
    backward: Collectives
    choice: dict[str, Strategy]
    memory: int
    problem: Problem


def solution(p: Problem, choice) -> Solution:
    """The :class:`Solution` of one strategy index per op."""
    g, forward, backward = p.graph, Collectives(), Collectives()
    picked = [p.options[v][i] for v, i in enumerate(choice)]
    for v, op in enumerate(p.ops):
        for u, w, k in p.edges:
            if w == v:
                forward += reshard(op.in_shapes[k], picked[u].out_spec, picked[v].in_specs[k],
                                   p.mesh_shape, g.dtype)
        forward += picked[v].forward
    for u, v, k in reversed(p.edges):
        backward += reshard(p.ops[v].in_shapes[k], picked[v].in_specs[k], picked[u].out_spec,
                            p.mesh_shape, g.dtype)
    for s in reversed(picked):
        backward += s.backward
    return Solution({op.name: s.notation for op, s in zip(p.ops, picked, strict=True)},
                    p.cost(choice), Collectives(forward), Collectives(backward),
                    {op.name: s for op, s in zip(p.ops, picked, strict=True)}, p.bytes(choice), p)


def _limit(memory_limit):
    if memory_limit is None:
        return math.inf
    return check.number("memory_limit", memory_limit, positive=True,
                        fix="It is bytes per device (or None for no limit).")


def _infeasible(p: Problem, limit: float) -> ShardingError:
    least = sum(m.min() for m in p.memory)
    return ShardingError(f"no choice of strategies fits memory_limit = {limit:,.0f} bytes per "
                         f"device; the least any choice needs is {least:,.0f}. Raise the limit or "
                         "use a larger mesh.")


def solve(graph: Graph, mesh_shape: MeshShape, system: cost.System,
          memory_limit: Bytes | None = None, microbatches: int = 1) -> Solution:
    """The cheapest strategy per op, by Alpa's ILP (``scipy.optimize.milp``, HiGHS).

    Args:
        graph: from :func:`tpviz.autoshard.mlp`, :func:`~tpviz.autoshard.transformer` or a
            :class:`~tpviz.autoshard.graph.Builder`.
        mesh_shape: axis name → size, e.g. ``{"X": 2, "Y": 4}``.
        system: a name in ``tpviz.core.cost.SYSTEMS`` or a ``System``.
        memory_limit: bytes per device the chosen strategies may keep (None: no limit).
        microbatches: m; the weight gradients' all-reduces cost 1/m each (one per m).

    Raises:
        ShardingError: an op with no strategy that divides, or no choice within the memory limit.
    """
    return solve_problem(problem(graph, mesh_shape, system, microbatches), memory_limit)


def solve_problem(p: Problem, memory_limit: Bytes | None = None) -> Solution:
    """:func:`solve` for a problem already tabulated (to solve it under several limits)."""
    limit = _limit(memory_limit)
    sizes = [len(o) for o in p.options]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    n_s = int(starts[-1])
    pair_start, n = [], n_s
    for u, v, _ in p.edges:
        pair_start.append(n)
        n += sizes[u] * sizes[v]
    scale = max(max(float(c.max()) for c in p.node), 1e-30)
    c = np.concatenate([*p.node, *(t.ravel() for t in p.edge)]) / scale
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0
    for v, size in enumerate(sizes):  # Σ_i s_v[i] = 1
        rows += [r] * size
        cols += range(starts[v], starts[v] + size)
        vals += [1.0] * size
        lo.append(1.0)
        hi.append(1.0)
        r += 1
    for (u, v, _), base in zip(p.edges, pair_start, strict=True):
        nu, nv = sizes[u], sizes[v]
        ids = base + np.arange(nu * nv).reshape(nu, nv)  # e[i, j]
        for i in range(nu):  # Σ_j e[i, j] - s_u[i] = 0
            rows += [r] * (nv + 1)
            cols += [*ids[i], starts[u] + i]
            vals += [1.0] * nv + [-1.0]
            r += 1
        for j in range(nv):  # Σ_i e[i, j] - s_v[j] = 0
            rows += [r] * (nu + 1)
            cols += [*ids[:, j], starts[v] + j]
            vals += [1.0] * nu + [-1.0]
            r += 1
        lo += [0.0] * (nu + nv)
        hi += [0.0] * (nu + nv)
    if math.isfinite(limit):  # Σ_v m_vᵀ s_v ≤ M
        rows += [r] * n_s
        cols += range(n_s)
        vals += list(np.concatenate(p.memory))
        lo.append(-np.inf)
        hi.append(limit)
        r += 1
    a = sp.csr_array((vals, (rows, cols)), shape=(r, n))
    integrality = np.zeros(n)
    integrality[:n_s] = 1  # s binary; e continuous (forced by the equalities)
    res = milp(c, constraints=LinearConstraint(a, lo, hi), integrality=integrality,
               bounds=Bounds(0, 1), options={"mip_rel_gap": 1e-9})
    if res.status == 2:  # HiGHS proved that no choice satisfies the constraints
        raise _infeasible(p, limit)
    if res.status != 0 or res.x is None:  # 1: time or iteration limit; 3, 4: solver trouble
        what = ("reached its time or iteration limit" if res.status == 1 else
                "stopped without a solution")
        raise SolverError(f"the ILP solver {what} (status {res.status}: {res.message}); no "
                           "proven optimum to report. Try fewer ops or a smaller mesh.")
    choice = [int(np.argmax(res.x[starts[v]:starts[v + 1]])) for v in range(len(sizes))]
    return solution(p, choice)


def brute_force(graph: Graph, mesh_shape: MeshShape, system: cost.System,
                memory_limit: Bytes | None = None) -> Solution:
    """The cheapest strategy per op by trying every combination (small graphs only).

    Raises:
        ArgumentError: more than 10⁶ combinations.
        ShardingError: as :func:`solve`.
    """
    limit = _limit(memory_limit)
    p = problem(graph, mesh_shape, system)
    count = math.prod(len(o) for o in p.options)
    if count > 10**6:
        raise ArgumentError(f"{count:,} combinations are too many to try; brute_force is for "
                            "graphs of a few ops. Use solve().")
    best, best_cost = None, math.inf
    for choice in itertools.product(*(range(len(o)) for o in p.options)):
        if p.bytes(choice) > limit:
            continue
        total = p.cost(choice)
        if total < best_cost:
            best, best_cost = choice, total
    if best is None:
        raise _infeasible(p, limit)
    return solution(p, best)

