"""Check collective plans and data-parallel steps against references and compiled programs."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from tpviz.collectives.plan import CollectivePlan
from tpviz.collectives.run import (
    dp_step_jit,
    dp_step_shard_map,
    program,
    psum_program,
    sgd_step,
)
from tpviz.core import compiled, verify
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import ArrayOf, Floats, JaxMesh, Numbers, Rate


@dataclass(frozen=True)
class PlanCheck:
    """What :func:`check_plan` found: the compiled permutes and the error against JAX's own."""

    plan: CollectivePlan
    found: Collectives
    max_error: float


def permutes(p: CollectivePlan) -> list[tuple[int, tuple[tuple[int, int], ...]]]:
    """The plan's steps as the compiled program should hold them: per step one
    collective-permute, its bytes per device and its (source, target) pairs."""
    return [(int(step[0].nbytes), tuple(sorted((s.src, s.dst) for s in step)))
            for step in p.steps]


def check_plan(p: CollectivePlan, mesh: JaxMesh, x: Numbers) -> PlanCheck:
    """Run the plan with ``ppermute`` (:func:`tpviz.collectives.run.program`) on ``x`` (a global
    float32 array split over the mesh's axis) and compare with JAX's ``psum`` (or
    ``psum_scatter``, ``all_gather``) and with the plan's sends.

    Raises:
        CheckFailed: the result differs from JAX's collective, or the compiled program's
            collectives are not one collective-permute per step with the plan's bytes and pairs.
    """
    prog = compiled.compile_for(program(p, mesh), x)
    error = verify.close(prog(x), psum_program(mesh, op=p.op)(x), f"the {p.algorithm} {p.op}")
    found = compiled.collectives(prog)
    verify.same([(c.kind, c.bytes, tuple(sorted(c.groups))) for c in found],
                [("collective-permute", b, pairs) for b, pairs in permutes(p)],
                "the compiled program's collectives (kind, bytes per device, pairs)")
    return PlanCheck(p, found, error)


@dataclass(frozen=True)
class DPCheck:
    """What :func:`check_dp` found for both data-parallel programs."""

    predicted: Collective
    shard_map: Collectives
    jit: Collectives
    max_error: float


def gradient_all_reduce(params, devices: int) -> Collective:
    """The plan of data parallelism: one all-reduce of every gradient (the bytes of the
    parameters) over the data-parallel devices."""
    nbytes = sum(int(np.asarray(w).nbytes) for w in jax.tree.leaves(params))
    return Collective("all-reduce", nbytes, devices, what="the gradients")


def check_dp(mesh: JaxMesh, params: dict[str, Floats], x: ArrayOf("B I"), y: ArrayOf("B O"),
             lr: Rate = 0.1) -> DPCheck:
    """Both data-parallel steps against the single-device step on the whole batch, and their
    compiled collectives against one all-reduce of the gradients.

    Raises:
        CheckFailed: a step differs from the reference, or a program's collectives are not
            all-reduces over all devices whose bytes add up to the gradients' bytes.
    """
    reference = jax.device_get(sgd_step(params, x, y, lr))
    want = gradient_all_reduce(params, mesh.size)
    found, error = [], 0.0
    for name, fn in (("shard_map", dp_step_shard_map(mesh, lr=lr)),
                     ("jit", dp_step_jit(mesh, lr=lr))):
        prog = compiled.compile_for(fn, params, x, y)
        error = max(error, verify.close(prog(params, x, y), reference,
                                        f"the {name} data-parallel step", tolerance=1e-5))
        cs = compiled.collectives(prog)
        verify.same(set(cs.kinds()), {"all-reduce"}, f"the {name} program's collective kinds")
        verify.same({c.group_size for c in cs}, {want.group_size},
                    f"the {name} program's group sizes")
        verify.same(sum(c.bytes for c in cs), want.bytes,
                    f"the bytes the {name} program all-reduces")
        found.append(cs)
    return DPCheck(want, found[0], found[1], error)
