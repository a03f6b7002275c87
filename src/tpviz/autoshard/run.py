"""Run a graph under ``jax.jit`` with the solver's shardings, and against GSPMD's own choice.

Every op's inputs and output get a ``with_sharding_constraint`` to the layouts of its chosen
strategy and every weight a ``NamedSharding``; GSPMD then inserts the collectives. With
``constrain="inputs"`` only the arguments (the input and the weights) carry shardings and GSPMD
propagates them through the graph on its own.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from tpviz.autoshard.graph import Graph, Op
from tpviz.autoshard.solve import Solution
from tpviz.core import compiled, verify
from tpviz.core.collectives import Collectives
from tpviz.core.kinds import JaxMesh, Seed
from tpviz.devices import local_device
from tpviz.errors import ArgumentError, ShardingError


def values(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs and weights (scaled so activations stay near 1)."""
    rng = np.random.default_rng(seed)
    out = {k: rng.standard_normal(s).astype(graph.dtype) for k, s in graph.inputs.items()}
    for op in graph.ops:
        if op.kind == "matmul":
            out[op.name] = (rng.standard_normal(op.weight) / np.sqrt(op.weight[0])).astype(
                graph.dtype)
    return out


def _apply(op: Op, args, w):
    if op.fn == "matmul":
        return args[0] @ w  # [B, D] · [D, F]
    if op.fn == "gelu":
        return jax.nn.gelu(args[0])
    if op.fn == "add":
        return args[0] + args[1]
    if op.fn == "heads":  # head-major columns [heads, (q, k, v), head width]
        b, cols = args[0].shape
        qkv = args[0].reshape(b, op.heads, 3, cols // (3 * op.heads))
        out = qkv[:, :, 0] * jax.nn.sigmoid(qkv[:, :, 1]) * qkv[:, :, 2]
        return out.reshape(b, cols // 3)
    return jnp.sum(args[0], axis=1, keepdims=True)  # sum over the columns


def function(graph: Graph, solution: Solution | None = None, mesh: JaxMesh | None = None):
    """``f(x_and_weights: dict) -> {output name: array}`` (every op no other op reads); with a
    solution and a mesh, every op's inputs, weight and output constrained to its strategy."""
    def constrain(a, spec):
        if solution is None:
            return a
        return jax.lax.with_sharding_constraint(a, NamedSharding(mesh, spec))

    def f(args):
        env = dict(args)
        if solution is not None:  # shared inputs arrive in their chosen layout
            for name in graph.inputs:
                if name in solution.choice:
                    env[name] = constrain(env[name], solution.choice[name].out_spec)
        for op in graph.ops:
            ins = [env[i] for i in op.inputs]
            w = env.get(op.name) if op.kind == "matmul" else None
            if solution is not None:  # the chosen strategy's layouts
                s = solution.choice[op.name]
                ins = [constrain(a, spec) for a, spec in zip(ins, s.in_specs, strict=True)]
                w = constrain(w, s.weight_spec) if w is not None else None
            out = _apply(op, ins, w)
            env[op.name] = out if solution is None else constrain(out, s.out_spec)
        return {name: env[name] for name in graph.outputs}

    return f


def shardings(graph: Graph, solution: Solution, mesh: JaxMesh) -> dict[str, NamedSharding]:
    """The arguments' shardings: each weight as its matmul's strategy wants it, each graph input
    in its chosen layout (an input read once: as its reader wants it)."""
    out = {name: NamedSharding(mesh, solution.choice[name].out_spec)
           for name in graph.inputs if name in solution.choice}
    for op in graph.ops:
        s = solution.choice[op.name]
        if op.kind == "matmul":
            out[op.name] = NamedSharding(mesh, s.weight_spec)
        for name, spec in zip(op.inputs, s.in_specs, strict=True):
            if name in graph.inputs and name not in out:
                out[name] = NamedSharding(mesh, spec)
    return out


def _mesh_matches(solution: Solution, mesh) -> None:
    want = solution.problem.mesh_shape
    if dict(mesh.shape) != want:
        raise ShardingError(f"the mesh has axes {dict(mesh.shape)} but the solution was planned "
                            f"for {want}; make it with tpviz.make_mesh({tuple(want.values())}, "
                            f"{tuple(want)}).")


def program(graph: Graph, solution: Solution, mesh: JaxMesh, constrain: str = "all",
            training: bool = False, seed: Seed = 0):
    """``(jitted function, its argument)``: the forward pass, or with ``training`` the forward
    and backward pass (``jax.vjp`` with a seeded output gradient; gradients of the input and of
    every weight).

    Raises:
        ArgumentError: ``constrain`` is not "all" or "inputs".
        ShardingError: the mesh is not the one the solution was planned for.
    """
    if constrain not in ("all", "inputs"):
        raise ArgumentError(f"constrain must be 'all' or 'inputs', got {constrain!r}.")
    _mesh_matches(solution, mesh)
    f = function(graph, solution if constrain == "all" else None, mesh)
    placed = shardings(graph, solution, mesh)
    args = {k: jax.device_put(v, placed[k]) for k, v in values(graph, seed).items()}
    if not training:
        return jax.jit(f), args
    rng = np.random.default_rng(seed + 1)
    dy = {name: jax.device_put(rng.standard_normal(graph.op(name).shape).astype(graph.dtype),
                               NamedSharding(mesh, solution.choice[name].out_spec))
          for name in graph.outputs}

    def step(args, dy):
        y, back = jax.vjp(f, args)
        return y, back(dy)[0]

    return jax.jit(step), (args, dy)


@dataclass(frozen=True)
class Run:
    """An executed solution: its error against the unsharded reference and its collectives."""

    error: float
    compiled: Collectives
    planned: Collectives

    @property
    def same_collectives(self) -> bool:
        """True when the program holds the planned collectives: the same kinds, bytes per device
        and group sizes (order aside)."""
        def key(cs):
            return Counter((c.kind, c.bytes, c.group_size) for c in cs if c.moves_data)
        return key(self.compiled) == key(self.planned)

    @property
    def same_bytes(self) -> bool:
        """True when each device sends the planned bytes (ring algorithms), however XLA groups
        the collectives (its all-reduce combiner merges independent ones into one)."""
        return abs(self.compiled.sent_bytes() - self.planned.sent_bytes()) <= 1e-9 * max(
            1.0, self.planned.sent_bytes())


def execute(graph: Graph, solution: Solution, mesh: JaxMesh, seed: Seed = 0,
            training: bool = False) -> Run:
    """Run the solution's forward pass (with ``training``: forward and backward) on ``mesh``,
    compare it with the unsharded reference and read the compiled collectives.

    Raises:
        CheckFailed: the sharded result differs from the reference.
        ShardingError: the mesh is not the one the solution was planned for.
    """
    fn, args = program(graph, solution, mesh, training=training, seed=seed)
    exe = compiled.compile_for(fn, *((args,) if not training else args))
    got = exe(*((args,) if not training else args))
    one = local_device()  # a device of this process
    ref_fn, ref_args = function(graph), {k: jax.device_put(v, one)
                                         for k, v in values(graph, seed).items()}
    if training:
        dy = {k: jax.device_put(verify.host(v, v.dtype), one) for k, v in args[1].items()}
        y, back = jax.vjp(ref_fn, ref_args)
        want = (y, back(dy)[0])
    else:
        want = jax.jit(ref_fn)(ref_args)
    verify.close(got, want, "the sharded result", tolerance=1e-4)
    planned = Collectives(solution.collectives + (solution.backward if training else []))
    return Run(verify.relative_error(got, want), compiled.collectives(exe), planned)


def gspmd_collectives(graph: Graph, solution: Solution, mesh: JaxMesh, training: bool = True,
                      constrain: str = "inputs") -> Collectives:
    """The compiled collectives when only the arguments carry the solution's shardings (GSPMD
    propagates the rest), or with ``constrain="all"``, every op's."""
    fn, args = program(graph, solution, mesh, constrain=constrain, training=training)
    return compiled.collectives(fn, *((args,) if not training else args))


__all__ = ["Run", "execute", "function", "gspmd_collectives", "program", "shardings",
           "values"]
