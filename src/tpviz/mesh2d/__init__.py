"""An MLP on a 2D ``(data, model)`` device mesh: data and model parallelism at once.

Plan level (instant): ``plan(batch, h1, h2, mesh)`` is the step table; ``compare`` sets it beside
data parallelism and 1D Megatron; ``best_mesh`` and ``step_time`` weigh communication against
compute. ``tpviz.mesh2d.run`` runs it on devices (by hand and by GSPMD) and checks it;
``tpviz.mesh2d.draw`` draws each step on the mesh.
"""

from tpviz.mesh2d.plan import (
    DATA,
    MODEL,
    SPECS,
    Plan,
    best_mesh,
    compare,
    data_parallel,
    describe,
    megatron_1d,
    meshes,
    plan,
    smallest_batch_per_device,
    step_time,
)

__all__ = ["DATA", "MODEL", "SPECS", "Plan", "best_mesh", "compare", "data_parallel", "describe",
           "megatron_1d", "meshes", "plan", "smallest_batch_per_device", "step_time"]
