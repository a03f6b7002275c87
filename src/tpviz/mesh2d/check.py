"""Check the 2D MLP: by hand and by GSPMD against one device, the plan and the compiled program."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import NamedSharding

from tpviz.core import compiled, verify
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import ArrayOf, Callback, JaxMesh, MeshShape
from tpviz.mesh2d.plan import Plan
from tpviz.mesh2d.run import (
    OUT_SPEC,
    forward,
    gspmd_forward,
    measured_shapes,
    place,
    plan_for,
    reduce_scatter,
    reference,
    training,
)


@dataclass(frozen=True)
class Check:
    plan: Plan
    forward: Collectives  # of the hand-written forward pass
    train: Collectives  # of its forward + backward
    gspmd_forward: Collectives
    gspmd_train: Collectives
    max_error: float  # largest relative error of outputs and gradients (all programs)
    weight_bytes: int  # per device, measured on the weight shards
    activation_bytes: int  # per device: In' and Tmp, from their measured shapes × itemsize


def axis_of(c: Collective, mesh) -> str:
    """Which mesh axis a compiled collective's groups run along: "data", "model" or "?"."""
    axes = compiled.mesh_axes(c, mesh)
    return axes[0] if axes and len(axes) == 1 else "?"


def found(collectives: Collectives, mesh: JaxMesh) -> list[tuple[str, str, int]]:
    """(kind, axis, bytes per device) of every collective that moves data (groups of 2+)."""
    return sorted((c.kind, axis_of(c, mesh), c.bytes) for c in collectives if c.moves_data)


def predicted(p: Plan, training: bool = False) -> list[tuple[str, str, int]]:
    return sorted((c.kind, c.axes[0], c.bytes) for c in p.collectives(training))


def as_gspmd(predicted_rows: Sequence[tuple[str, str, int]], mesh_sizes: MeshShape):
    """The plan as XLA's CPU backend compiles GSPMD's reduce-scatters: an all-reduce of the
    unscattered array over the same axis, then each device keeps its slice (no bytes moved)."""
    return sorted((("all-reduce", a, b * mesh_sizes[a]) if k == "reduce-scatter" else (k, a, b))
                  for k, a, b in predicted_rows)


def check(mesh: JaxMesh, x: ArrayOf("B D"), w1: ArrayOf("D F"), w2: ArrayOf("F D"),
          dy: ArrayOf("B D"),
          final: Callback = reduce_scatter) -> Check:
    """Run the 2D MLP by hand and by GSPMD (outputs and gradients); compare with one device.
    ``final``: the hand-written last step (default: :func:`reduce_scatter`).

    Raises:
        CheckFailed: a value differs from one device; the arrays' per-device shapes, or the
            bytes of weights and saved activations per device, differ from the plan; the
            hand-written program holds other collectives (kind, axis, bytes) than the plan's
            forward and backward steps; GSPMD's forward pass holds others than
            the plan's (its reduce-scatter may be compiled as an all-reduce and a slice).
    """
    p = plan_for(mesh, x.shape, w1.shape, np.dtype(x.dtype))
    args = place(mesh, x, w1, w2)
    dy_placed = jax.device_put(dy, NamedSharding(mesh, OUT_SPEC))
    want = jax.jit(training(reference))(x, w1, w2, dy)
    progs = {}
    error = 0.0
    for name, fn in (("hand-written", forward(mesh, final)), ("GSPMD", gspmd_forward(mesh))):
        fwd = compiled.compile_for(fn, *args)
        train = compiled.compile_for(jax.jit(training(fn)), *args, dy_placed)
        error = max(error, verify.close((fwd(*args), *train(*args, dy_placed)), (want[0], *want),
                                        f"the {name} 2D MLP's output and gradients"))
        progs[name] = (compiled.collectives(fwd), compiled.collectives(train))

    shapes = measured_shapes(mesh, x, w1, w2, final)
    verify.same(shapes, [s.result.local for s in p.steps[1:]], "per-device shapes of the steps")
    size = np.dtype(x.dtype).itemsize
    weights = sum(a.addressable_shards[0].data.nbytes for a in args[1:])
    saved = (np.prod(shapes[0]) + np.prod(shapes[3])) * size  # In', Tmp: the matmuls' inputs
    verify.same((weights, int(saved)), (p.memory.weights, p.memory.activations),
                "measured bytes of weights and of saved activations per device")
    (fwd, train), (gfwd, gtrain) = progs["hand-written"], progs["GSPMD"]
    for what, got, want_rows in (("forward pass", fwd, predicted(p)),
                                 ("training step", train, predicted(p, training=True))):
        verify.same(found(got, mesh), want_rows,
                    f"the hand-written {what}'s collectives (kind, axis, bytes)")
    gspmd = found(gfwd, mesh)
    verify.require(gspmd in (predicted(p), as_gspmd(predicted(p), p.mesh)),
                   f"GSPMD's forward pass holds {gspmd}; the plan says {predicted(p)}")
    return Check(p, fwd, train, gfwd, gtrain, error, weights, int(saved))

