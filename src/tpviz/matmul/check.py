"""Check a matmul plan on a real mesh against ``x @ w`` and the compiled program's collectives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpviz.core import compiled, verify
from tpviz.core.collectives import Collectives
from tpviz.core.kinds import ArrayOf, JaxMesh
from tpviz.matmul.plan import MatmulPlan
from tpviz.matmul.run import explicit, gspmd


@dataclass(frozen=True)
class Check:
    """What :func:`check` found: the result matched, and the collectives of both programs."""

    plan: MatmulPlan
    explicit: Collectives  # of the shard_map program
    gspmd: Collectives  # of the jit program
    max_error: float


def check(p: MatmulPlan, mesh: JaxMesh, x: ArrayOf("B D"), w: ArrayOf("D F")) -> Check:
    """Run the plan both ways; compare with the single-device product and the plan's collectives.

    Raises:
        CheckFailed: a result differs from ``x @ w`` or the explicit program's collectives
            (kind, bytes, group size, in order) differ from the plan's.
    """
    reference = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    programs = [compiled.compile_for(fn, x, w) for fn in (explicit(p, mesh), gspmd(p, mesh))]
    error = max(verify.close(program(x, w), reference, f"{name} In · W1")
                for name, program in zip(("shard_map", "GSPMD"), programs, strict=True))
    found = compiled.collectives(programs[0])
    verify.same([(c.kind, c.bytes, c.group_size) for c in found],
                [(c.kind, c.bytes, c.group_size) for c in p.collectives],
                "the compiled shard_map program's collectives (kind, bytes, group size)")
    return Check(p, found, compiled.collectives(programs[1]), error)
