"""Checks of the 3D run against one device and against the plan, and remat measured.

- :func:`check_run`: the (data, pipeline, tensor) training step's loss and gradients equal one
  device's, and its compiled collectives, grouped by mesh axis, are the planned ones;
- :func:`measure_remat`: activation bytes per layer read from compiled programs (temp bytes of a
  rolled loop over L and 2L layers: the difference is what L layers save) and the FLOPs of
  recomputing a layer (``cost_analysis``), without and with ``jax.checkpoint``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import jax
import numpy as np

from tpviz.core import compiled, verify
from tpviz.core.collectives import Collective, Collectives
from tpviz.together.run import (
    AXES,
    BLOCK,
    Config,
    data,
    init,
    place,
    reference_loss,
    train_step,
)

_P = jax.checkpoint_policies
# measure_remat's modes: no jax.checkpoint ("none"), or jax.checkpoint with a policy (the keys
# of tpviz.together.memory.CHECKPOINT_POLICIES, and "everything", which saves all it can)
POLICIES = {"none": None, "everything": _P.everything_saveable, "full": _P.nothing_saveable,
            "big matmuls": _P.save_only_these_names("mlp_in"),
            "dots, no batch dims": _P.dots_with_no_batch_dims_saveable,
            "dots": _P.dots_saveable}
POLICIES["dots saved"] = POLICIES["dots, no batch dims"]  # the earlier name


def by_axis(collectives, mesh) -> dict[str, Collectives]:
    """Collectives grouped by the mesh axes they run along ("data+pipeline" for two)."""
    groups = defaultdict(Collectives)
    for c in collectives:
        axes = compiled.mesh_axes(c, mesh)
        groups["+".join(axes) if axes else "?"].append(c)
    return dict(groups)


def planned(cfg: Config, mesh, remat: bool = False) -> dict[str, Collectives]:
    """The collectives the program should hold, per axis (float32, per device):

    - tensor: 2 all-reduces of ``[b, S, H]`` per layer and tick forward (g), 2 backward (f),
      2 more with remat (the recomputed forward, as Megatron repeats them); every stage
      computes at every one of the m + p - 1 ticks (SPMD: the bubble's ticks compute on zeros);
    - pipeline: a permute of ``[b, S, H]`` after every tick but the last, forward and back;
    - data: the gradients of the stage's blocks, all-reduced;
    - data+pipeline: the gradients of the replicated embedding and output layer (and the loss).
    """
    d, p, t = (mesh.shape[a] for a in AXES)
    m, h = cfg.microbatches, cfg.hidden
    b = cfg.batch // (d * m)
    act = 4 * b * cfg.seq * h
    ticks, layers = m + p - 1, cfg.layers // p
    tp = [Collective("all-reduce", act, t, axes=("tensor",))] * (ticks * layers * (6 if remat
                                                                                 else 4))
    pp = [Collective("collective-permute", act, p, axes=("pipeline",))] * (2 * (ticks - 1))
    block_bytes = 4 * layers * 12 * h * h // t
    replicated = 4 * (2 * cfg.vocab * h + cfg.seq * h) + 4  # embed, out, pos, and the loss
    return {"tensor": Collectives(tp), "pipeline": Collectives(pp),
            "data": Collectives([Collective("all-reduce", block_bytes, d, axes=("data",))]),
            "data+pipeline": Collectives([Collective("all-reduce", replicated, d * p,
                                                     axes=("data", "pipeline"))])}


@dataclass(frozen=True)
class RunCheck:
    loss: float
    gradient_error: float
    compiled: dict[str, Collectives]
    planned: dict[str, Collectives]
    memory: compiled.Memory


def check_run(mesh, cfg: Config | None = None, remat: bool = False) -> RunCheck:
    """Train one step on ``mesh`` and on one device (float32); compare loss, gradients and the
    collectives per axis (kinds, counts and bytes) with :func:`planned`.

    Raises:
        CheckFailed: a difference.
    """
    cfg = cfg or Config()
    params = init(cfg, mesh.shape["pipeline"])
    tokens, targets = data(cfg)
    step = train_step(mesh, cfg, remat)
    args = place(mesh, params, tokens, targets)
    program = compiled.compile_for(step, *args)
    loss, grads = program(*args)
    want_loss, want = jax.jit(jax.value_and_grad(reference_loss), static_argnums=3)(
        params, tokens, targets, cfg)
    verify.close(float(loss), float(want_loss), "loss", tolerance=1e-5)
    grads = {k: verify.host(v, np.float32) for k, v in grads.items()}  # whole, every process
    verify.close(grads, {k: np.asarray(v) for k, v in want.items()}, "gradients",
                 tolerance=1e-5)
    got = {k: Collectives(c for c in v if c.moves_data)
           for k, v in by_axis(compiled.collectives(program), mesh).items()}
    plan = planned(cfg, mesh, remat)
    verify.same(sorted(got), sorted(plan), "mesh axes with collectives")
    for axis, cs in plan.items():
        verify.same(set(got[axis].kinds()), set(cs.kinds()), f"kinds of collective along {axis}")
        moved, want_bytes = sum(c.bytes for c in got[axis]), sum(c.bytes for c in cs)
        if remat and axis == "tensor":  # XLA merges some recomputed all-reduces with the first
            least = sum(c.bytes for c in planned(cfg, mesh)[axis])
            verify.require(least <= moved <= want_bytes, f"bytes along tensor with remat: "
                           f"{moved}, the plan says {least} to {want_bytes}")
        else:
            verify.same(moved, want_bytes, f"bytes along {axis}")
    error = max(verify.relative_error(np.asarray(grads[k]), np.asarray(want[k]))
                for k in (*BLOCK, "embed", "pos", "out"))
    return RunCheck(float(loss), float(error), got, plan, compiled.memory(program))


def measure_remat(cfg: Config, mode: str = "none") -> dict[str, float]:
    """From compiled single-device training steps, rolled as a loop over the layers:
    ``bytes``, the temp bytes each layer adds (programs of L and 2L layers, the difference over
    L: what a layer saves for the backward pass), and ``flops``, the ``cost_analysis`` FLOPs of
    the 2L-layer program, in which the loop body (one layer) counts once: the difference
    between two modes is the recomputation of one layer. ``mode``: "none" (no
    ``jax.checkpoint``) or a key of :data:`POLICIES` (``jax.checkpoint`` with that policy:
    "full" keeps the layer input only; "big matmuls", "dots, no batch dims", "dots" and
    "everything" keep more)."""
    from tpviz.core import validate

    mode = validate.choice("mode", mode, POLICIES)
    remat, policy = mode != "none", POLICIES[mode]
    temps, flops = [], 0.0
    for layers in (cfg.layers, 2 * cfg.layers):
        one = Config(layers, cfg.hidden, cfg.heads, cfg.vocab, cfg.seq, cfg.batch, 1)
        params = init(one, 1)
        tokens, targets = data(one)
        program = compiled.compile_for(jax.grad(
            lambda w, one=one, tokens=tokens, targets=targets: reference_loss(
                w, tokens, targets, one, remat, policy, unroll=False)), params)
        temps.append(compiled.memory(program).temp)
        cost = program.cost_analysis()
        flops = (cost[0] if isinstance(cost, list) else cost)["flops"]
    return {"bytes": (temps[1] - temps[0]) / cfg.layers, "flops": flops}
