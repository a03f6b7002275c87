"""The 2D-sharded MLP for real: by hand with ``jax.shard_map``, and left to the compiler (GSPMD).

``mlp`` is the per-device program of the step table (:mod:`tpviz.mesh2d.plan`); ``forward``
wraps it in ``shard_map`` over a ``(data, model)`` mesh. ``gspmd_forward`` gives the plain
single-device MLP to ``jax.jit`` with the same input and output shardings. ``check`` runs both,
with gradients, and compares them with one device, with the plan's bytes and with the
collectives of the compiled programs.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz import hlo
from tpviz.errors import ShardingError
from tpviz.megatron import relative_error
from tpviz.mesh2d.plan import DATA, MODEL, SPECS, Plan, mesh_shape, plan

IN_SPECS = (SPECS["X"], SPECS["W₁"], SPECS["W₂"])
OUT_SPEC = SPECS["X"]


def reduce_scatter(partial, axis: str = MODEL):
    """Step 7: sum the partial results over ``axis`` and keep this device's slice of the
    columns, so that Y is sharded exactly like X."""
    return jax.lax.psum_scatter(partial, axis, scatter_dimension=1, tiled=True)


def steps(x, w1, w2, final=reduce_scatter):
    """Every array of the step table, on one device (inside ``shard_map``)."""
    xg = jax.lax.all_gather(x, MODEL, axis=1, tiled=True)  # 1. X'[B/d, H₁]
    w1g = jax.lax.all_gather(w1, DATA, axis=0, tiled=True)  # 2. W₁'[H₁, H₂/m]
    h = xg @ w1g  # 3. H[B/d, H₂/m]
    a = jax.nn.relu(h)  # 4.
    w2g = jax.lax.all_gather(w2, DATA, axis=1, tiled=True)  # 5. W₂'[H₂/m, H₁]
    partial = a @ w2g  # 6. partial sums [B/d, H₁]
    return xg, w1g, h, a, w2g, partial, final(partial)  # 7. Y[B/d, H₁/m]


def mlp(x, w1, w2, final=reduce_scatter):
    """The per-device 2D MLP: ``Y[B/d, H₁/m]`` from the shards of X, W₁ and W₂."""
    return steps(x, w1, w2, final)[-1]


def reference(x, w1, w2):
    """The MLP on one device."""
    return jax.nn.relu(x @ w1) @ w2


def _check_axes(mesh) -> dict[str, int]:
    """``{"data": d, "model": m}`` of ``mesh``, with a clear error for a wrong mesh."""
    if not (hasattr(mesh, "axis_names") and hasattr(mesh, "devices")):
        raise ShardingError(f"expected a jax.sharding.Mesh, got {type(mesh).__name__}; make one "
                            "with tpviz.make_mesh((4, 2), ('data', 'model')).")
    if tuple(mesh.axis_names) == (MODEL, DATA):
        raise ShardingError(
            f"the mesh's axes are ordered ('model', 'data'), {dict(mesh.shape)}: swapped. The "
            "2D MLP numbers devices row-major over (data, model), so that a model group is "
            "neighbouring devices; make the mesh with tpviz.make_mesh((d, m), ('data', 'model')).")
    return mesh_shape(mesh)


def _check_mesh(mesh, x_shape, w1_shape, dtype="float32") -> Plan:
    """The plan for these arrays on ``mesh``, with a clear error for a wrong mesh or sizes."""
    shape = _check_axes(mesh)
    if len(x_shape) != 2 or len(w1_shape) != 2:
        raise ShardingError(f"x and w1 must be 2D, got shapes {x_shape} and {w1_shape}.")
    return plan(int(x_shape[0]), int(x_shape[1]), int(w1_shape[1]),
                (shape[DATA], shape[MODEL]), dtype)


def forward(mesh, final=reduce_scatter):
    """``fn(x, w1, w2) -> y`` run by hand on ``mesh`` (arrays laid out as the plan says)."""
    _check_axes(mesh)
    return jax.shard_map(lambda x, w1, w2: mlp(x, w1, w2, final), mesh=mesh, in_specs=IN_SPECS,
                         out_specs=OUT_SPEC)


def gspmd_forward(mesh):
    """The single-device MLP given to the compiler with the same shardings; the hidden
    activations are pinned to ``H[B_data, H₂_model]`` with ``with_sharding_constraint``."""
    _check_axes(mesh)

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


def place(mesh, x, w1, w2):
    """Put the full arrays on the mesh as the plan lays them out.

    Raises:
        ShardingError: the mesh is not ``(data, model)``, or a size does not divide its axis.
    """
    _check_mesh(mesh, np.shape(x), np.shape(w1), np.dtype(getattr(x, "dtype", np.float32)))
    return tuple(jax.device_put(a, NamedSharding(mesh, s))
                 for a, s in zip((x, w1, w2), IN_SPECS, strict=True))


def measured_shapes(mesh, x, w1, w2, final=reduce_scatter) -> list[tuple[int, ...]]:
    """The per-device shape of every array of the step table, read from the arrays' shards."""
    program = jax.shard_map(lambda *a: steps(*a, final), mesh=mesh, in_specs=IN_SPECS,
                            out_specs=(P(DATA, MODEL),) * 7)
    outs = program(*place(mesh, x, w1, w2))
    return [tuple(o.addressable_shards[0].data.shape) for o in outs]


@dataclass(frozen=True)
class Check:
    plan: Plan
    forward: hlo.Collectives  # of the hand-written forward pass
    train: hlo.Collectives  # of its forward + backward
    gspmd_forward: hlo.Collectives
    gspmd_train: hlo.Collectives
    max_error: float  # largest relative error of outputs and gradients (all programs)
    weight_bytes: int  # per device, measured on the weight shards
    activation_bytes: int  # per device, X' and A measured on the arrays


def axis_of(c: hlo.Collective, mesh) -> str:
    """Which mesh axis a compiled collective's groups run along: "data", "model" or "?"."""
    ids = np.arange(mesh.devices.size).reshape(mesh.devices.shape)
    rows = {tuple(r) for r in ids.tolist()}  # vary the model index: model groups
    cols = {tuple(c) for c in ids.T.tolist()}
    groups = set(c.groups)
    return MODEL if groups == rows else DATA if groups == cols else "?"


def found(collectives: hlo.Collectives, mesh) -> list[tuple[str, str, int]]:
    """(kind, axis, bytes per device) of every collective that moves data (groups of 2+)."""
    return sorted((c.kind, axis_of(c, mesh), c.bytes) for c in collectives if c.group_size > 1)


def predicted(p: Plan, training: bool = False) -> list[tuple[str, str, int]]:
    return sorted((c.kind, c.axis, c.bytes) for c in p.collectives(training))


def as_gspmd(predicted_rows, mesh_sizes: dict[str, int]):
    """The plan as XLA's CPU backend compiles GSPMD's reduce-scatters: an all-reduce of the
    unscattered array over the same axis, then each device keeps its slice (no bytes moved)."""
    return sorted((("all-reduce", a, b * mesh_sizes[a]) if k == "reduce-scatter" else (k, a, b))
                  for k, a, b in predicted_rows)


def check(mesh, x, w1, w2, dy, final=reduce_scatter) -> Check:
    """Run the 2D MLP by hand and by GSPMD (outputs and gradients); compare with one device.
    ``final``: the hand-written last step (default: :func:`reduce_scatter`).

    Raises:
        AssertionError: a value differs from one device; the arrays' per-device shapes, or the
            bytes of weights and saved activations per device, differ from the plan; the
            hand-written program holds other collectives (kind, axis, bytes) than the plan's
            forward and backward steps; GSPMD's forward pass holds others than
            the plan's (its reduce-scatter may be compiled as an all-reduce and a slice).
    """
    p = _check_mesh(mesh, x.shape, w1.shape, np.dtype(x.dtype))
    args = place(mesh, x, w1, w2)
    dy_placed = jax.device_put(dy, NamedSharding(mesh, OUT_SPEC))
    want = jax.jit(training(reference))(x, w1, w2, dy)
    progs = {}
    errors = []
    for name, fn in (("forward", forward(mesh, final)), ("gspmd", gspmd_forward(mesh))):
        fwd = hlo.compile(fn, *args)
        train = hlo.compile(jax.jit(training(fn)), *args, dy_placed)
        got_y, got_grads = train(*args, dy_placed)
        got = jax.tree.leaves((fwd(*args), got_y, got_grads))
        errors += [relative_error(a, b) for a, b in zip(got, jax.tree.leaves((want[0], *want)),
                                                        strict=True)]
        progs[name] = (hlo.parse(fwd.as_text()), hlo.parse(train.as_text()))
    assert max(errors) < 1e-4, f"the 2D MLP differs from one device (relative {max(errors):.2e})"

    shapes = measured_shapes(mesh, x, w1, w2, final)
    planned = [s.result.local for s in p.steps[1:]]
    assert shapes == planned, f"per-device shapes {shapes} differ from the plan's {planned}"
    size = np.dtype(x.dtype).itemsize
    weights = sum(a.addressable_shards[0].data.nbytes for a in args[1:])
    saved = (np.prod(shapes[0]) + np.prod(shapes[3])) * size  # X' and A: the matmuls' inputs
    assert (weights, saved) == (p.memory.weights, p.memory.activations), (
        f"measured {weights} bytes of weights and {saved} of saved activations per device; the "
        f"plan says {p.memory.weights} and {p.memory.activations}")
    (fwd, train), (gfwd, gtrain) = progs["forward"], progs["gspmd"]
    for what, got, want_rows in (("forward pass", fwd, predicted(p)),
                                 ("training step", train, predicted(p, training=True))):
        assert found(got, mesh) == want_rows, (
            f"the hand-written {what} holds {found(got, mesh)}; the plan says {want_rows}")
    gspmd = found(gfwd, mesh)
    assert gspmd in (predicted(p), as_gspmd(predicted(p), p.mesh)), (
        f"GSPMD's forward pass holds {gspmd}; the plan says {predicted(p)}")
    return Check(p, fwd, train, gfwd, gtrain, max(errors), weights, int(saved))

