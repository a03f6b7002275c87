"""Run a matmul plan on a real mesh: by hand (``jax.shard_map``) and by the compiler (GSPMD)."""

from __future__ import annotations

import jax
from jax.sharding import NamedSharding

from tpviz.compat import all_gather_invariant
from tpviz.core.kinds import JaxMesh
from tpviz.core.notation import axes_of
from tpviz.matmul.plan import MatmulPlan, _entry


def explicit(p: MatmulPlan, mesh: JaxMesh):
    """The plan as a ``jax.shard_map`` program: the collectives are written by hand."""
    dx, dw = axes_of(_entry(p.x_spec, 1)), axes_of(_entry(p.w_spec, 0))

    def per_device(x, w):  # x: [B/|B axes|, D/|dx|], w: [D/|dw|, F/|F axes|]
        if p.case == 2 and dx:
            x = all_gather_invariant(x, dx, axis=1, tiled=True)  # x: [., D]
        if p.case == 2 and dw:
            w = all_gather_invariant(w, dw, axis=0, tiled=True)  # w: [D, .]
        y = x @ w  # y: [B/|B axes|, F/|F axes|], a partial sum over D in case 3
        if p.case == 3 and p.reduce_scatter:
            return jax.lax.psum_scatter(y, dx, scatter_dimension=1, tiled=True)
        if p.case == 3:
            return jax.lax.psum(y, dx)
        return y

    return jax.shard_map(per_device, mesh=mesh, in_specs=(p.x_spec, p.w_spec),
                         out_specs=p.y_spec)


def gspmd(p: MatmulPlan, mesh: JaxMesh):
    """The same product left to the compiler: ``jax.jit`` with the plan's shardings."""
    return jax.jit(lambda x, w: x @ w,
                   in_shardings=(NamedSharding(mesh, p.x_spec), NamedSharding(mesh, p.w_spec)),
                   out_shardings=NamedSharding(mesh, p.y_spec))
