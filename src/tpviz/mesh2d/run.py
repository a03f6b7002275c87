"""The 2D-sharded MLP for real: by hand with ``jax.shard_map``, and left to the compiler (GSPMD).

``mlp`` is the per-device program of the step table (:mod:`tpviz.mesh2d.plan`); ``forward``
wraps it in ``shard_map`` over a ``(data, model)`` mesh. ``gspmd_forward`` gives the plain
single-device MLP to ``jax.jit`` with the same input and output shardings.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.core.kinds import ArrayOf, Callback, JaxMesh
from tpviz.errors import ShardingError
from tpviz.mesh2d.plan import DATA, MODEL, SPECS, Plan, mesh_shape, plan

IN_SPECS = (SPECS["In"], SPECS["W₁"], SPECS["W₂"])
OUT_SPEC = SPECS["In"]


def reduce_scatter(partial, axis: str = MODEL):
    """Step 7: sum the partial results over ``axis`` and keep this device's slice of the
    columns, so that Out is sharded exactly like In."""
    return jax.lax.psum_scatter(partial, axis, scatter_dimension=1, tiled=True)


def steps(x, w1, w2, final=reduce_scatter):
    """Every array of the step table, on one device (inside ``shard_map``)."""
    xg = jax.lax.all_gather(x, MODEL, axis=1, tiled=True)  # 1. In'[B/N_X, D]
    w1g = jax.lax.all_gather(w1, DATA, axis=0, tiled=True)  # 2. W₁'[D, F/N_Y]
    h = xg @ w1g  # 3. In'W₁'[B/N_X, F/N_Y]
    a = jax.nn.relu(h)  # 4. Tmp
    w2g = jax.lax.all_gather(w2, DATA, axis=1, tiled=True)  # 5. W₂'[F/N_Y, D]
    partial = a @ w2g  # 6. Out', partial sums [B/N_X, D]
    return xg, w1g, h, a, w2g, partial, final(partial)  # 7. Out[B/N_X, D/N_Y]


def mlp(x, w1, w2, final=reduce_scatter):
    """The per-device 2D MLP: ``Out[B/N_X, D/N_Y]`` from the shards of In, W₁ and W₂."""
    return steps(x, w1, w2, final)[-1]


def reference(x: ArrayOf("B D"), w1: ArrayOf("D F"), w2: ArrayOf("F D")):
    """The MLP on one device."""
    return jax.nn.relu(x @ w1) @ w2


def check_axes(mesh) -> dict[str, int]:
    """``{"data": N_X, "model": N_Y}`` of ``mesh``, with a clear error for a wrong mesh."""
    if not (hasattr(mesh, "axis_names") and hasattr(mesh, "devices")):
        raise ShardingError(f"expected a jax.sharding.Mesh, got {type(mesh).__name__}; make one "
                            "with tpviz.make_mesh((4, 2), ('data', 'model')).")
    if tuple(mesh.axis_names) == (MODEL, DATA):
        raise ShardingError(
            f"the mesh's axes are ordered ('model', 'data'), {dict(mesh.shape)}: swapped. The "
            "2D MLP numbers devices row-major over (data, model), so that a model group is "
            "neighbouring devices; make the mesh with "
            "tpviz.make_mesh((n_x, n_y), ('data', 'model')).")
    return mesh_shape(mesh)


def plan_for(mesh, x_shape, w1_shape, dtype="float32") -> Plan:
    """The plan for these arrays on ``mesh``, with a clear error for a wrong mesh or sizes."""
    shape = check_axes(mesh)
    if len(x_shape) != 2 or len(w1_shape) != 2:
        raise ShardingError(f"x and w1 must be 2D, got shapes {x_shape} and {w1_shape}.")
    return plan(int(x_shape[0]), int(x_shape[1]), int(w1_shape[1]),
                (shape[DATA], shape[MODEL]), dtype)


def forward(mesh: JaxMesh, final: Callback = reduce_scatter):
    """``fn(x, w1, w2) -> y`` run by hand on ``mesh`` (arrays laid out as the plan says)."""
    check_axes(mesh)
    return jax.shard_map(lambda x, w1, w2: mlp(x, w1, w2, final), mesh=mesh, in_specs=IN_SPECS,
                         out_specs=OUT_SPEC)


def gspmd_forward(mesh: JaxMesh):
    """The single-device MLP given to the compiler with the same shardings; the hidden
    activations are pinned to ``In'W₁'[B_data, F_model]`` with ``with_sharding_constraint``."""
    check_axes(mesh)

    def fn(x, w1, w2):
        h = jax.lax.with_sharding_constraint(x @ w1, NamedSharding(mesh, P(DATA, MODEL)))
        return jax.nn.relu(h) @ w2

    return jax.jit(fn, in_shardings=tuple(NamedSharding(mesh, s) for s in IN_SPECS),
                   out_shardings=NamedSharding(mesh, OUT_SPEC))


def training(fn):
    """Output and gradients of ``fn`` for an output gradient ``dy`` (one vjp: forward and
    backward in one program)."""
    def step(x, w1, w2, dy):
        y, pullback = jax.vjp(fn, x, w1, w2)
        return y, pullback(dy)

    return step


def place(mesh: JaxMesh, x: ArrayOf("B D"), w1: ArrayOf("D F"), w2: ArrayOf("F D")):
    """Put the full arrays on the mesh as the plan lays them out.

    Raises:
        ShardingError: the mesh is not ``(data, model)``, or a size does not divide its axis.
    """
    plan_for(mesh, np.shape(x), np.shape(w1), np.dtype(getattr(x, "dtype", np.float32)))
    return tuple(jax.device_put(a, NamedSharding(mesh, s))
                 for a, s in zip((x, w1, w2), IN_SPECS, strict=True))


def measured_shapes(mesh, x, w1, w2, final=reduce_scatter) -> list[tuple[int, ...]]:
    """The per-device shape of every array of the step table, read from the arrays' shards."""
    program = jax.shard_map(lambda *a: steps(*a, final), mesh=mesh, in_specs=IN_SPECS,
                            out_specs=(P(DATA, MODEL),) * 7)
    outs = program(*place(mesh, x, w1, w2))
    return [tuple(o.addressable_shards[0].data.shape) for o in outs]
