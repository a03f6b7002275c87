"""Exercise checkers, one ``check_<name>`` per exercise (see :mod:`._framework`)."""

from tpviz.exercises._framework import ExerciseFailed, NotAttempted, Wrong, checker
from tpviz.exercises.layouts import (
    check_bytes_per_device,
    check_holders,
    check_rows_over_mesh,
    check_total,
)
from tpviz.exercises.matmul import (
    check_all_gather_bytes,
    check_cases,
    check_column_parallel,
    check_reduce_scatter,
)
from tpviz.exercises.megatron import (
    check_all_reduces,
    check_conjugates,
    check_row_parallel,
    check_weight_bytes,
)
from tpviz.exercises.mesh2d import (
    check_best_mesh,
    check_final_reduce_scatter,
    check_step_shardings,
)
from tpviz.exercises.pipeline import (
    check_balance,
    check_bubble,
    check_microbatches,
    check_one_f_one_b,
    check_weight_versions,
)
from tpviz.exercises.zero import (
    check_fewest_devices,
    check_grad_reduce_scatter,
    check_zero_memory,
)

__all__ = [
    "ExerciseFailed",
    "NotAttempted",
    "Wrong",
    "check_all_gather_bytes",
    "check_all_reduces",
    "check_balance",
    "check_best_mesh",
    "check_bubble",
    "check_bytes_per_device",
    "check_cases",
    "check_column_parallel",
    "check_conjugates",
    "check_fewest_devices",
    "check_final_reduce_scatter",
    "check_grad_reduce_scatter",
    "check_holders",
    "check_microbatches",
    "check_one_f_one_b",
    "check_reduce_scatter",
    "check_row_parallel",
    "check_rows_over_mesh",
    "check_step_shardings",
    "check_total",
    "check_weight_bytes",
    "check_weight_versions",
    "check_zero_memory",
    "checker",
]
