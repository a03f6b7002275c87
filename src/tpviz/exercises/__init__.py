"""Every topic's exercise checkers in one place, for the notebooks: ``tpviz.exercises.check_x``.

The checkers live in each topic's ``exercises`` room; the framework in :mod:`tpviz.core.exercises`.
"""

from tpviz.autoshard.exercises import (
    check_column_parallel_bytes,
    check_edge_bytes,
    check_edge_constraints,
    check_gelu_layout,
    check_greedy_trap,
    check_stages,
    check_switch_batch,
)
from tpviz.collectives.exercises import (
    check_bucket_size,
    check_crossover,
    check_ring_bytes,
    check_ring_reduce_scatter,
    check_same_as_big_batch,
    check_server_seconds,
)
from tpviz.core.exercises import ExerciseFailed, NotAttempted, Wrong, checker
from tpviz.layouts.exercises import (
    check_block_notation,
    check_bytes_per_device,
    check_fit_layout,
    check_holders,
    check_rows_over_mesh,
    check_total,
)
from tpviz.matmul.exercises import (
    check_all_gather_bytes,
    check_cases,
    check_column_parallel,
    check_latency_crossover,
    check_matmul_design,
    check_reduce_scatter,
)
from tpviz.megatron.exercises import (
    check_all_reduces,
    check_conjugates,
    check_row_parallel,
    check_tp_bytes,
    check_tp_degree,
    check_weight_bytes,
)
from tpviz.mesh2d.exercises import (
    check_best_mesh,
    check_final_reduce_scatter,
    check_step_shardings,
)
from tpviz.moe.exercises import (
    check_all_to_all_bytes,
    check_aux_loss,
    check_capacity,
    check_design,
    check_dispatch,
    check_dropped,
    check_keep,
)
from tpviz.pipeline.exercises import (
    check_balance,
    check_bubble,
    check_microbatches,
    check_one_f_one_b,
    check_weight_versions,
)
from tpviz.zero.exercises import (
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
    "check_all_to_all_bytes",
    "check_aux_loss",
    "check_balance",
    "check_best_mesh",
    "check_block_notation",
    "check_bubble",
    "check_bucket_size",
    "check_bytes_per_device",
    "check_capacity",
    "check_cases",
    "check_column_parallel",
    "check_column_parallel_bytes",
    "check_conjugates",
    "check_crossover",
    "check_design",
    "check_dispatch",
    "check_dropped",
    "check_edge_bytes",
    "check_edge_constraints",
    "check_fewest_devices",
    "check_final_reduce_scatter",
    "check_fit_layout",
    "check_gelu_layout",
    "check_grad_reduce_scatter",
    "check_greedy_trap",
    "check_holders",
    "check_keep",
    "check_latency_crossover",
    "check_matmul_design",
    "check_microbatches",
    "check_one_f_one_b",
    "check_reduce_scatter",
    "check_ring_bytes",
    "check_ring_reduce_scatter",
    "check_row_parallel",
    "check_rows_over_mesh",
    "check_same_as_big_batch",
    "check_server_seconds",
    "check_stages",
    "check_step_shardings",
    "check_switch_batch",
    "check_total",
    "check_tp_bytes",
    "check_tp_degree",
    "check_weight_bytes",
    "check_weight_versions",
    "check_zero_memory",
    "checker",
]
