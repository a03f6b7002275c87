"""Every topic's exercise checkers in one place, for the notebooks: ``tpviz.exercises.check_x``.

The checkers live in each topic's ``exercises`` room; the framework in :mod:`tpviz.core.exercises`.
A checker's topic is imported when the checker is first used (PEP 562), so a chapter pays only
for its own topics.
"""

import importlib

# module -> the checkers (and framework names) it defines
_HOMES = {
    "tpviz.asyncpipe.builds": (
        "check_chimera",
        "check_two_bw",
    ),
    "tpviz.asyncpipe.exercises": (
        "check_dualpipe_idle",
        "check_memory_cap",
        "check_staleness",
        "check_weight_memory",
    ),
    "tpviz.autoshard.builds": (
        "check_megatron_shardings",
        "check_rows_over_y",
        "check_solver_block",
    ),
    "tpviz.autoshard.exercises": (
        "check_column_parallel_bytes",
        "check_edge_bytes",
        "check_edge_constraints",
        "check_gelu_layout",
        "check_greedy_trap",
        "check_stages",
        "check_switch_batch",
    ),
    "tpviz.collectives.exercises": (
        "check_bucket_size",
        "check_crossover",
        "check_dp_gradients",
        "check_ring_bytes",
        "check_ring_reduce_scatter",
        "check_same_as_big_batch",
        "check_server_seconds",
    ),
    "tpviz.context.builds": (
        "check_ring_step",
        "check_ulysses",
    ),
    "tpviz.context.exercises": (
        "check_causal_imbalance",
        "check_context_design",
        "check_online_combine",
        "check_ring_attention_bytes",
        "check_ulysses_ratio",
    ),
    "tpviz.core.exercises": (
        "ExerciseFailed",
        "NotAttempted",
        "Wrong",
        "checker",
    ),
    "tpviz.inference.exercises": (
        "check_decode_batch",
        "check_draft_length",
        "check_heads_decode",
        "check_kv_per_token",
        "check_lse_combine",
        "check_paging_gain",
        "check_serving_design",
    ),
    "tpviz.layouts.exercises": (
        "check_block_notation",
        "check_bytes_per_device",
        "check_explicit_reshard",
        "check_fit_layout",
        "check_global_moments",
        "check_holders",
        "check_reshard_columns",
        "check_rows_over_mesh",
        "check_total",
    ),
    "tpviz.machines.exercises": (
        "check_fast_gather",
        "check_hop_crossover",
        "check_matmul_ridge",
        "check_pod_design",
        "check_ring_all_to_all",
        "check_sharp",
        "check_torus_price",
        "check_wraparound",
    ),
    "tpviz.matmul.builds": (
        "check_fsdp_layer",
    ),
    "tpviz.matmul.exercises": (
        "check_all_gather_bytes",
        "check_cases",
        "check_column_parallel",
        "check_fsdp_matmul",
        "check_latency_crossover",
        "check_matmul_design",
        "check_reduce_scatter",
    ),
    "tpviz.megatron.exercises": (
        "check_all_reduces",
        "check_conjugates",
        "check_row_parallel",
        "check_sequence_parallel",
        "check_tp_bytes",
        "check_tp_degree",
        "check_weight_bytes",
    ),
    "tpviz.mesh2d.builds": (
        "check_final_reduce_scatter",
        "check_mlp2d",
    ),
    "tpviz.mesh2d.exercises": (
        "check_best_mesh",
        "check_compute_bound_batch",
        "check_mesh_design",
        "check_step_shardings",
        "check_weights_held",
    ),
    "tpviz.moe.builds": (
        "check_combine",
        "check_dispatch",
    ),
    "tpviz.moe.exercises": (
        "check_all_to_all_bytes",
        "check_aux_loss",
        "check_capacity",
        "check_design",
        "check_dropped",
        "check_keep",
    ),
    "tpviz.pipeline.exercises": (
        "check_balance",
        "check_bubble",
        "check_microbatches",
        "check_one_f_one_b",
        "check_pipeline_design",
        "check_weight_versions",
    ),
    "tpviz.pipeline.builds": (
        "check_small_stash",
        "check_tick",
    ),
    "tpviz.pytorch.builds": (
        "check_colwise_style",
        "check_sequence_style",
        "check_sp_plan",
        "check_tp_plan",
    ),
    "tpviz.pytorch.exercises": (
        "check_fsdp_bytes",
        "check_fsdp_collectives",
        "check_jax_to_torch",
        "check_pipeline_split",
        "check_schedule_design",
    ),
    "tpviz.together.builds": (
        "check_grid_mlp",
        "check_grid_mlp_step",
        "check_grid_reduce_scatter",
    ),
    "tpviz.together.builds_zero": (
        "check_grid_zero_step",
    ),
    "tpviz.together.exercises": (
        "check_3d_bubble",
        "check_3d_design",
        "check_first_stage",
        "check_layer_activations",
        "check_selective_saving",
        "check_tensor_group",
    ),
    "tpviz.zero.exercises": (
        "check_fewest_devices",
        "check_grad_reduce_scatter",
        "check_stage3_bytes",
        "check_stage3_ratio",
        "check_zero1_step",
        "check_zero_design",
        "check_zero_memory",
    ),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'tpviz.exercises' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = sorted(_HOME)
