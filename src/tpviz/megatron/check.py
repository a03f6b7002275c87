"""Check the Megatron programs against one device and the plan's all-reduces."""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax

from tpviz.core import compiled, verify
from tpviz.core.collectives import Collectives
from tpviz.core.kinds import ArrayOf, JaxMesh, Keys
from tpviz.errors import ShardingError
from tpviz.megatron.plan import AXIS, plan, specs
from tpviz.megatron.run import (
    DIMS,
    MLP,
    forward,
    gspmd_train_step,
    model,
    place,
    reference_step,
    train_step,
)


@dataclass(frozen=True)
class Check:
    forward: Collectives  # of the sharded forward pass
    train: Collectives  # of the sharded training step
    gspmd: Collectives  # of the same step left to the compiler (GSPMD)
    max_error: float  # largest relative error of the outputs, loss and gradients (all programs)
    weight_bytes_per_device: int  # measured from the array shards


def check(kind: str, mesh: JaxMesh, x: ArrayOf("B S H"), target: ArrayOf("B S H"),
          params: Keys(*MLP, dims=DIMS), head_dim: int = 0,
          axis: str = AXIS) -> Check:
    """Run the sharded forward pass and training step; compare with one device and the plan.

    Raises:
        CheckFailed: a value differs from the single-device model, the weight shards are not
            1/N of the weights, or the compiled programs hold other all-reduces than the plan's
            (kind, bytes, group size, count).
    """
    wanted = set(specs(kind, axis))
    if not isinstance(params, dict) or set(params) != wanted:
        got = sorted(params) if isinstance(params, dict) else type(params).__name__
        raise ShardingError(f"megatron.check({kind!r}): params has {got}; a {kind} needs the "
                            f"weights {sorted(wanted)}. Make them with "
                            f"tpviz.megatron.init(hidden, ffn, kind={kind!r}).")
    if axis not in mesh.shape:
        raise ShardingError(f"the mesh has axes {tuple(mesh.shape)}, not {axis!r}; make it with "
                            f"tpviz.make_mesh((N,), ({axis!r},)) or pass axis=.")
    if kind == "block" and (not isinstance(head_dim, int) or head_dim < 1):
        raise ShardingError(f"a block needs head_dim, the width of one attention head; got "
                            f"{head_dim!r}. For H = 32 and 4 heads, head_dim=8.")
    n = mesh.shape[axis]
    hidden, ffn = params["w1"].shape
    heads = hidden // head_dim if kind == "block" else 1
    p = plan(math.prod(x.shape[:-1]), hidden, ffn, heads, n, x.dtype, kind)
    placed = place(kind, mesh, params, axis)
    fwd = compiled.compile_for(forward(kind, mesh, head_dim, axis), x, placed)
    step = compiled.compile_for(train_step(kind, mesh, head_dim, axis), x, target, placed)
    ref_y = jax.jit(model(kind, head_dim))(x, params)
    ref_loss, ref_grads = jax.jit(reference_step, static_argnums=(0, 4))(kind, x, target, params,
                                                                         head_dim)
    error = verify.close((fwd(x, placed), *step(x, target, placed)),
                         (ref_y, ref_loss, ref_grads), "the sharded output, loss and gradients")
    per_device = sum(a.addressable_shards[0].data.nbytes for a in placed.values())
    verify.same(per_device, p.weight_bytes_per_device, "weight bytes per device")
    found_f, found_t = compiled.collectives(fwd), compiled.collectives(step)
    for what, found, training in (("forward pass", found_f, False),
                                  ("training step", found_t, True)):
        verify.same([(c.kind, c.bytes, c.group_size) for c in found],
                    [(c.kind, c.bytes, c.group_size) for c in p.collectives(training)],
                    f"the compiled {what}'s collectives (kind, bytes, group size)")
    gspmd = compiled.compile_for(gspmd_train_step(kind, mesh, head_dim, axis), x, target, placed)
    error = max(error, verify.close(gspmd(x, target, placed), (ref_loss, ref_grads),
                                    "the compiler's (GSPMD) loss and gradients"))
    return Check(found_f, found_t, compiled.collectives(gspmd), error, per_device)
