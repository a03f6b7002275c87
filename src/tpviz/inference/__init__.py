"""Inference (chapter 14): the KV cache, prefill and decode on the roofline, and a model split
to serve it."""

from tpviz.core.publish import publish
from tpviz.inference import draw, explore, model, paged, plan, serve, shards
from tpviz.inference.check import Checked, check, mesh_of, reference
from tpviz.inference.explore import explore_decode, render_decode
from tpviz.inference.plan import (
    BYTES,
    Step,
    critical_batch,
    decode,
    kv_cache_bytes,
    network,
    prefill,
    slice_shape,
    weight_bytes,
)
from tpviz.inference.run import SCHEMES, combine_across, place, program, step_body
from tpviz.inference.serve import (
    CHIP_HOUR,
    PALM_540B,
    chip_counts,
    curve,
    disaggregate,
    max_batch,
    min_chips,
    speculative,
    speculative_priced,
    weight_stationary,
)

__all__ = ["BYTES", "CHIP_HOUR", "PALM_540B", "SCHEMES", "Checked", "Step", "check", "chip_counts",
           "combine_across", "critical_batch", "curve", "decode", "disaggregate", "draw",
           "explore", "explore_decode", "kv_cache_bytes", "max_batch", "mesh_of", "min_chips",
           "model", "network", "paged", "place", "plan", "prefill", "program", "reference",
           "render_decode", "serve", "shards", "slice_shape", "speculative", "speculative_priced",
           "step_body", "weight_bytes", "weight_stationary"]

publish(globals())
