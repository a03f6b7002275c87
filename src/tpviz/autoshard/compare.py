"""The solver's choice beside the hand-made plans of earlier chapters and greedy choice, and
where it switches.

``data_parallel`` splits the batch over every mesh axis; ``megatron`` splits the first matmul of
each half-block by columns and the second by rows over every mesh axis (the Megatron chapter).
Both are fixed choices costed by the same model as the solver, so the three compare directly.
"""

from __future__ import annotations

import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.autoshard.graph import OPS, Graph, mlp
from tpviz.autoshard.solve import Problem, Solution, problem, solution, solve
from tpviz.core.cost import System
from tpviz.core.kinds import Callback, MeshShape, Size
from tpviz.errors import ArgumentError

COLUMN, ROW, FOLLOW = ("w1", "qkv"), ("w2", "out"), ("gelu", "attn")

def fixed(graph: Graph, mesh_shape: MeshShape, system: System, pick: Callback) -> Solution:
    """The solution where ``pick(op, strategies)`` names each op's strategy (by notation or
    index), e.g. data parallelism or Megatron, for comparison with the solver's choice.

    Raises:
        ArgumentError: ``pick`` names a strategy the op does not have.
    """
    return fixed_problem(problem(graph, mesh_shape, system), pick)


def fixed_problem(p: Problem, pick: Callback) -> Solution:
    """:func:`fixed` for a problem already tabulated. Shared inputs take the layout cheapest for
    their readers' picks."""
    choice: list[int] = []
    for op, options in zip(p.ops, p.options, strict=True):
        if op.kind == "input":
            choice.append(-1)
            continue
        want = pick(op, options)
        names = [s.notation for s in options]
        if isinstance(want, str):
            if want not in names:
                raise ArgumentError(f"op {op.name!r} has no strategy {want!r}; it has {names}.")
            want = names.index(want)
        if isinstance(want, bool) or not isinstance(want, int) or not 0 <= want < len(names):
            raise ArgumentError(f"pick chose {want!r} for op {op.name!r}; give one of its "
                                f"strategies {names} or an index below {len(names)}.")
        choice.append(int(want))
    for v, op in enumerate(p.ops):
        if op.kind == "input":
            total = sum(p.edge[k][:, choice[w]] for k, (u, w, _) in enumerate(p.edges) if u == v)
            choice[v] = int(np.argmin(total))
    return solution(p, choice)


def _all(mesh_shape):
    axes = tuple(mesh_shape)
    return axes[0] if len(axes) == 1 else axes


def _find(options, want) -> int:
    for i, s in enumerate(options):
        if want(s):
            return i
    raise ArgumentError("this graph has no such strategy on this mesh (a size does not divide "
                        "over all the devices).")


def _problem(graph, mesh_shape, system) -> Problem:
    return graph if isinstance(graph, Problem) else problem(graph, mesh_shape, system)


def data_parallel(graph: Graph | Problem, mesh_shape: MeshShape | None = None,
                  system: System | None = None) -> Solution:
    """Every op split along the batch (rows) over all mesh axes; weights replicated (``graph``
    may be a tabulated :class:`Problem`, then without mesh and system)."""
    p = _problem(graph, mesh_shape, system)
    axes = _all(p.mesh_shape)
    return fixed_problem(p, lambda op, options: _find(
        options, lambda s: s.in_specs[0] == P(axes, None) and s.out_spec[0] == axes))


def megatron(graph: Graph | Problem, mesh_shape: MeshShape | None = None,
             system: System | None = None) -> Solution:
    """Megatron over all mesh axes: ``w1``/``qkv`` column-parallel, ``w2``/``out`` row-parallel,
    ``gelu``/``attn`` on the split columns, the rest replicated.

    Raises:
        ArgumentError: an op whose name does not say its role (only for mlp() and
            transformer() graphs).
    """
    p = _problem(graph, mesh_shape, system)
    axes = _all(p.mesh_shape)

    def pick(op, options):
        role = op.name.split(".")[0]
        if role in COLUMN:
            return _find(options, lambda s: s.weight_spec == P(None, axes)
                         and s.in_specs[0] == P(None, None))
        if role in ROW:
            return _find(options, lambda s: s.weight_spec == P(axes, None))
        if role in FOLLOW:
            return _find(options, lambda s: s.out_spec == P(None, axes))
        if role.startswith(("res", "add")):
            return _find(options, lambda s: s.out_spec == P(None, None))
        raise ArgumentError(f"op {op.name!r}: megatron() knows the roles of mlp() and "
                            "transformer() ops only.")

    return fixed_problem(p, pick)


def is_data_parallel(solution: Solution) -> bool:
    """Every matmul splits only the batch, over all the mesh axes."""
    axes = _all(solution.problem.mesh_shape)
    return all(s.in_specs[0] == P(axes, None) and s.weight_spec == P(None, None)
               for s in solution.choice.values() if s.weight_spec is not None)


def is_megatron(solution: Solution) -> bool:
    """Every matmul is Megatron's column- or row-parallel over all the mesh axes."""
    axes = _all(solution.problem.mesh_shape)
    return all(s.weight_spec in (P(None, axes), P(axes, None)) and s.in_specs[0][0] is None
               for s in solution.choice.values() if s.weight_spec is not None)


def switch_batch(hidden: int, ffn: int, mesh_shape: MeshShape, system: System,
                 layers: Size(64, OPS) = 1,
                 largest: int = 2**24) -> int:
    """The smallest batch (a multiple of the device count) at which the solver picks data
    parallelism for the MLP, by bisection (the choice flips once as the batch grows).

    Raises:
        ArgumentError: it picks data parallelism nowhere up to ``largest``.
    """
    n = 1
    for size in dict(mesh_shape).values():
        n *= size

    def dp(b):
        return is_data_parallel(solve(mlp(b * n, hidden, ffn, layers), mesh_shape, system))

    lo, hi = 1, largest // n  # in units of n
    if not dp(hi):
        raise ArgumentError(f"the solver never picks data parallelism up to batch {largest:,}.")
    if dp(lo):
        return n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if dp(mid) else (mid, hi)
    return hi * n


def greedy(graph: Graph, mesh_shape: MeshShape, system: System) -> Solution:
    """Op by op in order, the strategy cheapest for that op alone: its own cost plus the
    resharding from what its producers already chose. Not optimal in general."""
    p = problem(graph, mesh_shape, system)
    choice: list[int] = []
    for v in range(len(p.options)):
        total = p.node[v].copy()
        for k, (u, w, _) in enumerate(p.edges):
            if w == v:
                total = total + p.edge[k][choice[u]]
        choice.append(int(np.argmin(total)))
    return solution(p, choice)


def same_strategies(solution: Solution, graph: Graph) -> Solution:
    """The strategies of ``solution`` (planned for some sizes) on another graph of the same ops,
    e.g. a small one to execute: the strategies, not the sizes, are what runs."""
    p = solution.problem
    return fixed(graph, p.mesh_shape, p.system, lambda op, _: solution.strategies[op.name])


def ilp_with_edge_rows(edge_rows, p) -> float | None:
    """The optimum of the intra-op ILP of problem ``p`` (a :class:`~tpviz.autoshard.Problem`)
    with each edge's rows from ``edge_rows(n_u, n_v) -> (A, lower, upper)`` over ``[s_u, s_v,
    e]`` instead of :func:`~tpviz.autoshard.solve`'s own (s and e binary); None when the ILP
    has no solution. Exercise 12.4 runs a learner's rows through it."""
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint, milp

    sizes = [len(o) for o in p.options]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    blocks, lo, hi, n = [], [], [], int(starts[-1])
    edge_start = []
    for u, v, _ in p.edges:
        edge_start.append(n)
        n += sizes[u] * sizes[v]
    for v, size in enumerate(sizes):  # one strategy per op
        row = np.zeros(n)
        row[starts[v]:starts[v] + size] = 1
        blocks.append(row[None])
        lo.append(1.0)
        hi.append(1.0)
    for (u, v, _), base in zip(p.edges, edge_start, strict=True):
        nu, nv = sizes[u], sizes[v]
        a, low, high = (np.asarray(x, dtype=float) for x in edge_rows(nu, nv))
        cols = [*range(starts[u], starts[u] + nu), *range(starts[v], starts[v] + nv),
                *range(base, base + nu * nv)]
        full = np.zeros((a.shape[0], n))
        full[:, cols] = a
        blocks.append(full)
        lo += list(low)
        hi += list(high)
    c = np.concatenate([*p.node, *(t.ravel() for t in p.edge)])
    res = milp(c, constraints=LinearConstraint(sp.csr_array(np.vstack(blocks)), lo, hi),
               integrality=np.ones(n), bounds=Bounds(0, 1))
    return float(res.fun) if res.status == 0 else None
