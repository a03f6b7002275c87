"""A fresh probe of bad input (issue 42): inputs written from the public signatures and
docstrings alone, before the validation mechanism existed, and run once against it.

Each public function is called with good arguments once (it must work), then with one argument
at a time replaced by a bad value; then a few calls that are bad as a whole. The calls run in a
child process, one after another, under a time limit per call (the parent kills a child that
runs past it, records a hang and starts a new child for the rest) and a memory cap
(``RLIMIT_DATA``, 2 GiB above what the child holds after importing tpviz; a child that dies or
raises ``MemoryError`` records out of memory). Each call is classed as:

- clear: an error of tpviz (``TpvizError`` and a ``ValueError``/``TypeError``) or a checker's ✗,
  within 2 s, whose message names the argument (the probe gives the word to look for);
- cryptic: a tpviz error that does not name the argument, or takes longer than 2 s;
- raw: any other exception;
- silent: no error at all;
- hang: still running after ``--limit`` seconds; oom: out of memory.

Usage: ``python benchmarks/probe_fresh.py [--limit 20] [-v]`` from the repository root with
``src`` on the path. Prints the table and every call that is not clear.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import multiprocessing as mp
import sys
import time
from collections import Counter

NAN, INF = math.nan, math.inf


def _f(path: str):
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(f"tpviz.{module}"), name)


def _t(path, good, bad):
    """A function by path, its good keyword arguments, and {argument: [bad values]}."""
    return path, good, bad


def _ones(*shape):
    import numpy as np

    return np.ones(shape, np.float32)


def _full(shape, value):
    import numpy as np

    return np.full(shape, value, np.float32)


def _ints(rows):
    import numpy as np

    return np.array(rows, np.int32)


def _spec(*entries):
    from jax.sharding import PartitionSpec

    return PartitionSpec(*entries)


# --- the inputs ------------------------------------------------------------------------------
# (function path or a callable taking **kwargs, good kwargs, {argument: [bad values]})
TABLE = [
    # the hardware model (chapter 2)
    _t("core.hardware.roofline", dict(name="H100", flops=1e12, nbytes=1e9),
       {"name": ["", "h200x"], "flops": [-1.0, NAN], "nbytes": [-5.0, INF],
        "dtype": ["fp64x", 8]}),
    _t("core.hardware.matmul_intensity", dict(b=128, d=1024, f=4096),
       {"b": [-1], "d": [0, 3.5], "f": ["4096"], "itemsize": [0, 1.5]}),
    _t("core.hardware.mixed_batch", dict(flops=1e15, bandwidth=1e11, ffn=8192),
       {"bandwidth": [NAN, -1e9], "ffn": [-8192], "axes_x": [0, 2.5], "axes_y": ["2"]}),
    _t("core.hardware.tensor_parallel_limit", dict(flops=1e15, bandwidth=1e11, ffn=8192),
       {"axes": [-1, NAN], "flops": [INF]}),
    _t("core.hardware.data_parallel_batch", dict(flops=1e15, bandwidth=1e11),
       {"bandwidth": [0.0], "axes": [0]}),
    _t("core.hardware.best_fsdp", dict(batch=512.0, ffn=8192, devices=32),
       {"batch": [-1.0, NAN], "ffn": [0], "devices": [10**12], "axes_x": [-2]}),
    _t("core.hardware.tpu", dict(name="TPU v5p", mesh_shape=(4, 4)),
       {"mesh_shape": [(), (4, 0), (2**20, 2**20), (4, "4")],
        "wrap": [(True,), ("yes", "no"), 1]}),
    _t("core.hardware.gpu_cluster", dict(name="H100", gpus=8),
       {"gpus": [0, -8, 8.5, 10**20, "8"], "name": ["A100x", None]}),
    _t(lambda **k: _f("core.hardware.gpu_cluster")("H100", 16).collective_time(**k),
       dict(kind="all-reduce", nbytes=1e6),
       {"kind": ["allreduce", ""], "nbytes": [-1.0, NAN], "gpus": [0, 17, 3.0]}),
    _t(lambda **k: _f("core.hardware.gpu_cluster")("H100", 16).price(**k),
       dict(kind="all-gather", nbytes=1e6),
       {"per_node": [0, -1], "algorithm": ["bogus"]}),
    _t(lambda **k: _f("core.hardware.tpu")("TPU v5e", (4, 4)).collective_time(**k),
       dict(kind="all-gather", nbytes=1e6),
       {"axes": [(5,), ("X",), (0, 0)], "nbytes": [-1.0]}),
    _t(lambda **k: _f("core.hardware.tpu")("TPU v5e", (4, 4)).dcn_price(**k),
       dict(kind="all-reduce", nbytes=1e6, slices=2), {"slices": [0, -2, 2.5]}),
    _t("core.hardware.chip_of", dict(name="H100"), {"name": ["", 42]}),
    _t(lambda **k: _f("core.hardware.chip_of")("H100").peak(**k), dict(dtype="bf16"),
       {"dtype": ["int3", None]}),
    _t("core.cost.system", dict(value="H100 (NVLink)"), {"value": ["", 3.0, None]}),
    _t("core.cost.estimate", dict(flops=1e12, collectives=[], system="H100 (NVLink)"),
       {"flops": [-1e12, NAN], "system": ["tpu"], "collectives": [None, 5]}),
    _t(lambda **k: _f("core.cost.system")("H100 (NVLink)").network(**k), dict(devices=8),
       {"devices": [0, 2.5, 10**9]}),
    _t(lambda **k: _f("core.collectives.Collective")("all-reduce", 1024, 8).time(
        _f("core.cost.system")("H100 (NVLink)"), **k), dict(latency=0.0), {"latency": [-1.0, NAN]}),
    _t("core.collectives.Collective", dict(kind="all-gather", bytes=1024, group_size=8),
       {"kind": ["bogus"], "bytes": [-1], "group_size": [0]}),
    _t("core.layout.dtype_size", dict(dtype="float32"), {"dtype": ["float", 4, None]}),
    _t("core.layout.array_shape", dict(name="A", shape=(4, 4)),
       {"shape": [(-1, 4), (4.5, 4), "4x4"]}),
    _t("core.verify.close", dict(got=[1.0, 2.0], want=[1.0, 2.0], what="y"),
       {"tolerance": [-1.0, NAN], "got": [[1.0]]}),
    _t("core.figures.palette", dict(n=4), {"n": [-1, 10**9, 2.5]}),
    _t("core.figures.figure", dict(height=3.0), {"height": [-1.0, NAN], "width": [0.0]}),
    _t("core.compiled.parse_hlo", dict(hlo_text="HloModule m"), {"hlo_text": [None, 5]}),
    # devices, meshes, notation and layouts (chapter 0)
    _t("layouts.shard_shape", dict(shape=(8, 16), spec="A[I_X, J]", mesh_shape={"X": 2}),
       {"shape": [(8.5, 16), (), ((8,), 16)],
        "spec": ["A[I_X, J_X]", "A[I_X]", "B[I_X, J_Q]"],
        "mesh_shape": [{"X": -2}, {"X": 2.5}, {}, {"X": "2"}]}),
    _t("layouts.bytes_per_device", dict(shape=(8, 16), dtype="float32", spec="A[I_X, J]",
                                        mesh_shape={"X": 2}),
       {"dtype": ["float128x", 32], "shape": [(8, -16)]}),
    _t("layouts.replication", dict(spec="A[I_X, J]", mesh_shape={"X": 2}),
       {"spec": ["A[I_Y, J]", 7], "mesh_shape": [{"X": 0}]}),
    _t("layouts.blocks", dict(shape=(8, 8), spec="A[I_X, J]", mesh_shape={"X": 4}),
       {"mesh_shape": [{"X": 10**6}], "shape": [(10**9, 10**9)]}),
    _t(lambda **k: _f("layouts.to_notation")(_spec("X", None), **k), dict(name="A"),
       {"name": ["", 5], "ndim": [-1, 2.5], "dims": [("I",)]}),
    _t("layouts.parse", dict(notation="A[I_X, J]"),
       {"notation": ["A[I_X J]", "", "A[I_X, I_X]", None]}),
    _t("layouts.as_spec", dict(spec_or_notation="A[I_X, J]"),
       {"spec_or_notation": [5, "A[I_XX, J]"]}),
    _t("layouts.validate_spec", dict(shape=(8, 8), spec="A[I_X, J]", mesh_shape={"X": 2}),
       {"spec": ["A[I_X, J, K]"], "shape": [(9, 8)]}),
    _t("layouts.draw.sharding", dict(shape=(8, 8), spec="A[I_X, J]", mesh_shape={"X": 4}),
       {"name": [5], "dtype": ["foo"]}),
    _t("layouts.explore.render_layout", dict(mesh="X=2, Y=4", notation="A[I_X, J_Y]", rows=8,
                                              cols=16, dtype="float32"),
       {"rows": [0], "cols": [-4], "mesh": ["X=3"], "notation": ["A[I_Z, J]"],
        "dtype": ["int4"]}),
    _t("make_mesh", dict(shape=(8,), axis_names=("X",)),
       {"axis_names": [("",), (5,)], "shape": [(), (8.0,)]}),
    # collectives (chapter 1)
    _t("collectives.plan", dict(algorithm="ring", op="all-reduce", devices=8, nbytes=1e6),
       {"algorithm": ["rings", ""], "op": ["allreduce"], "devices": [-8, 8.0, 10**7],
        "nbytes": [-1.0, NAN, INF, "1e6"]}),
    _t("collectives.lower_bound", dict(devices=8, nbytes=1e6),
       {"devices": [-8, 0], "nbytes": [-1.0]}),
    _t("collectives.crossover", dict(a="ring", b="tree", devices=8, alpha=1e-6, beta=1e9),
       {"alpha": [-1e-6, NAN], "beta": [0.0], "op": ["bogus"], "a": ["ringg"]}),
    _t(lambda **k: _f("collectives.plan")("ring", "all-reduce", 8, 1e6).time(**k),
       dict(alpha=1e-6, beta=1e9), {"alpha": [NAN], "beta": [-1.0, "fast"]}),
    _t("collectives.expected", dict(op="all-reduce", inputs=_ones(4, 4)),
       {"op": ["bogus"], "inputs": [[]]}),
    _t(lambda **k: _f("collectives.replay")(_f("collectives.plan")("ring", "all-reduce", 4, 64),
                                            _ones(4, 16), **k),
       dict(upto=1), {"upto": [-1, 100, 1.5]}),
    _t("collectives.render_collectives", dict(algorithm="ring", devices=8, size="1 MB"),
       {"devices": [0], "size": ["-1 MB", "lots"], "alpha_us": [-5.0], "beta_gbs": [0.0]}),
    _t("collectives.buckets.assign", dict(grad_bytes=[1.0, 2.0, 3.0], bucket_bytes=4.0),
       {"grad_bytes": [[1.0, 2.0, -3.0], []], "bucket_bytes": [0.0, NAN]}),
    _t("collectives.buckets.simulate", dict(grad_times=[1.0, 2.0], grad_bytes=[1e6, 1e6],
                                            bucket_bytes=1e6, devices=8, alpha=1e-6,
                                            beta=1e9),
       {"grad_bytes": [[1e6]], "devices": [0], "algorithm": ["bogus"]}),
    _t("collectives.buckets.best_bucket", dict(grad_times=[1.0, 2.0], grad_bytes=[1e6, 1e6],
                                               devices=8, alpha=1e-6, beta=1e9),
       {"devices": [-8], "sizes": [[]]}),
    _t("collectives.buckets.candidates", dict(grad_bytes=[1e6, 2e6]),
       {"grad_bytes": [[], [NAN]]}),
    _t("collectives.draw.cost_figure", dict(devices=8, alpha=1e-6, beta=1e9),
       {"devices": [0], "nbytes": [-1.0]}),
    _t(lambda **k: _f("collectives.draw.steps_figure")(
        _f("collectives.plan")("ring", "all-reduce", 4, 64), **k), dict(per_row=4),
       {"per_row": [0], "labels": ["no"]}),
    _t(lambda **k: _f("collectives.follow")(_f("collectives.plan")("ring", "all-reduce", 4,
                                                                     64), **k),
       dict(axis="X"), {"axis": [5]}),
    # hardware drawings and explorers (chapter 2)
    _t("machines.draw.torus", dict(mesh_shape=(4, 4)),
       {"mesh_shape": [(0, 4), (2**12, 2**12)], "wrap": [("True", "False")]}),
    _t("machines.draw.roofline", dict(chip="TPU v5e"),
       {"chip": ["TPU v9"], "batches": [(), (-16,)], "d": [0]}),
    _t("machines.render_network", dict(machine="TPU v5e 4×4"),
       {"machine": ["bogus"], "group": ["bogus"], "kind": ["bogus"], "megabytes": [-10.0]}),
    _t("machines.render_roofline", dict(chip="TPU v5e"),
       {"chip": [""], "eight_bit": ["no"], "batch": [-1, 0]}),
    # sharded matmul (chapter 3)
    _t("matmul.plan", dict(x_shape=(16, 32), w_shape=(32, 64), x_spec="In[B_X, D_Y]",
                           w_spec="W1[D_Y, F]", mesh_shape={"X": 2, "Y": 4}),
       {"x_shape": [(16, 31), (16,), (-16, 32)], "w_shape": [(33, 64)],
        "x_spec": ["In[B_Q, D]"], "mesh_shape": [{"X": 0, "Y": 4}], "dtype": ["floaty"],
        "reduce_scatter": ["yes", 1]}),
    _t("matmul.explore.render_matmul", dict(mesh="X=2, Y=4", x="In[B_X, D_Y]", w="W1[D_Y, F]",
                                            b=1024, d=4096, f=4096, system="TPU v5e (ICI)"),
       {"b": [0], "d": [-1], "f": [3.5], "system": ["bogus"]}),
    # Megatron (chapter 4)
    _t("megatron.plan", dict(tokens=2048, hidden=1024, ffn=4096, heads=16, devices=4),
       {"tokens": [-2048, 0, 2048.0], "hidden": [NAN], "ffn": [-1], "heads": [0],
        "devices": [-4, 10**9], "dtype": ["bf17"], "kind": ["moe"]}),
    _t("megatron.shapes", dict(kind="mlp", hidden=16, ffn=32),
       {"hidden": [0], "ffn": [2.5], "kind": [""]}),
    _t("megatron.specs", dict(kind="mlp"), {"axis": [3]}),
    _t("megatron.init", dict(hidden=16, ffn=32, kind="mlp"),
       {"hidden": [-16], "ffn": [10**9], "seed": [-1, 1.5]}),
    _t(lambda **k: _f("megatron.plan")(2048, 1024, 4096, 16, 4).flops(**k), dict(sequence=0),
       {"sequence": [-1], "training": ["no"]}),
    _t(lambda **k: _f("megatron.plan")(2048, 1024, 4096, 16, 4).collectives(**k), dict(),
       {"training": ["yes"]}),
    _t("megatron.explore.render_megatron", dict(devices=4, hidden=1024, ffn_ratio=4, heads=16,
                                                tokens=2048, dtype="bf16"),
       {"ffn_ratio": [0], "heads": [-16], "tokens": [NAN]}),
    _t("megatron.draw.timeline", dict(kind="mlp"), {"kind": ["nope"]}),
    _t("megatron.layer_norm", dict(x=_ones(2, 4)), {"eps": [-1.0, NAN]}),
    # ZeRO (chapter 5)
    _t("zero.memory", dict(params=1e9, devices=8, stage=2),
       {"params": [INF], "devices": [10**15], "stage": [2.0, -1, True],
        "param_bytes": [-2, NAN], "grad_bytes": [INF], "optimizer_bytes": ["12"]}),
    _t("zero.collectives", dict(params=1e9, devices=8, stage=2), {"param_bytes": [0]}),
    _t("zero.fsdp_collectives", dict(nbytes=1e6, devices=8),
       {"nbytes": [-1.0], "devices": [0], "reshard_after_forward": ["False"]}),
    _t("zero.smallest_devices", dict(params=1e9, stage=3, capacity=80e9),
       {"capacity": [NAN, INF, 0.0]}),
    _t("zero.draw.memory_bars", dict(params=1e9, devices=8),
       {"capacity": [-1.0], "stage": [7]}),
    _t("zero.draw.partitions", dict(devices=4), {"devices": [0, 10**6]}),
    _t("zero.check.measure", dict(stage=1, layers=2, width=64, devices=8),
       {"stage": [5], "layers": [0], "width": [-1], "devices": [3]}),
    _t("zero.explore.render_zero", dict(model="7.5B (ZeRO paper)", billions=7.5, devices=64,
                                        stage=2,
                                        precision="mixed bf16 + fp32 Adam (2 + 2 + 12)",
                                        accelerator_gb=80.0),
       {"billions": [-7.5], "devices": [0], "precision": ["fp8"], "accelerator_gb": [NAN]}),
    # the 2D mesh (chapter 6)
    _t("mesh2d.plan", dict(batch=64, hidden=128, ffn=512, mesh=(4, 2)),
       {"batch": [-64], "hidden": [0], "ffn": [NAN], "mesh": [(8,), (4, -2), "4x2"],
        "dtype": ["half"]}),
    _t("mesh2d.best_mesh", dict(batch=64, hidden=128, ffn=512),
       {"devices": [7, -8], "system": ["bogus"]}),
    _t("mesh2d.compare", dict(batch=64, hidden=128, ffn=512), {"devices": [0]}),
    _t("mesh2d.meshes", dict(batch=64, hidden=128, ffn=512, devices=8), {"devices": [0]}),
    _t(lambda **k: _f("mesh2d.step_time")(_f("mesh2d.plan")(64, 128, 512), **k),
       dict(system="H100 (NVLink)"), {"system": [None], "training": ["yes"]}),
    _t("mesh2d.smallest_batch_per_device", dict(ffn=8192, system="H100 (NVLink)"),
       {"ffn": [-1], "axes_x": [0]}),
    _t(lambda **k: _f("mesh2d.draw.step")(_f("mesh2d.plan")(64, 128, 512), **k), dict(k=0),
       {"k": [-1, 99]}),
    _t(lambda **k: _f("mesh2d.plan")(64, 128, 512).sent(**k), dict(), {"training": [1]}),
    _t("mesh2d.data_parallel", dict(batch=64, hidden=128, ffn=512, devices=8),
       {"devices": [0]}),
    _t("mesh2d.megatron_1d", dict(batch=64, hidden=128, ffn=512, devices=8),
       {"hidden": [-128]}),
    # pipelines (chapter 7)
    _t("pipeline.schedule", dict(name="1f1b", stages=4, microbatches=8),
       {"name": ["", None], "stages": [1.5], "microbatches": [10**12]}),
    _t("pipeline.schedule", dict(name="interleaved", stages=4, microbatches=8, chunks=2),
       {"chunks": [0, -2, 2.5]}),
    _t(lambda **k: _f("pipeline.simulate")(_f("pipeline.schedule")("1f1b", 4, 8), **k), dict(),
       {"t_f": [-1.0], "t_b": [NAN], "t_w": [-0.5], "p2p": [INF]}),
    _t(lambda **k: _f("pipeline.steady_state")(_f("pipeline.schedule")("1f1b", 4, 8), **k),
       dict(), {"steps": [0, -3], "t_f": [NAN], "durations": [{"F": -1.0}, {"X": 1.0}]}),
    _t("pipeline.balance", dict(costs=[1.0, 2.0, 3.0], stages=2),
       {"costs": [[], [1.0, INF]], "stages": [2.5]}),
    _t("pipeline.bubble_formula", dict(name="1f1b", stages=4, microbatches=8),
       {"stages": [0], "chunks": [0], "forward": [-1.0], "backward": [NAN]}),
    _t(lambda **k: _f("pipeline.simulate")(_f("pipeline.schedule")("1f1b", 4, 8)).work(**k),
       dict(device=0), {"device": [-1, 99, 2.5]}),
    _t(lambda **k: _f("pipeline.draw.gantt")(
        _f("pipeline.simulate")(_f("pipeline.schedule")("1f1b", 4, 8)), **k), dict(),
       {"title": [5], "labels": ["yes"]}),
    _t(lambda **k: _f("pipeline.draw.held_over_time")(
        _f("pipeline.simulate")(_f("pipeline.schedule")("1f1b", 4, 8)), **k), dict(device=0),
       {"device": [-1]}),
    _t("pipeline.explore.render_pipeline", dict(name="1f1b", stages=4, microbatches=8,
                                                chunks=2, backward_ratio=2.0),
       {"backward_ratio": [-1.0], "chunks": [0]}),
    _t("pipeline.spmd_check", dict(name="1f1b", stages=2, microbatches=4),
       {"stages": [0], "microbatches": [-1], "width": [0], "rows": [3.5], "slots": [-1]}),
    _t(lambda **k: _f("pipeline.schedule")("interleaved", 4, 8, 2).device(**k),
       dict(microbatch=0, chunk=0), {"microbatch": [-1], "chunk": [9]}),
    # asynchronous pipelines (chapter 8)
    _t("asyncpipe.versions", dict(name="pipedream", steps=8, stages=4),
       {"name": ["bogus"], "steps": [-1], "stages": [0]}),
    _t("asyncpipe.formulas.paper_bubble", dict(name="1f1b", p=4, m=8),
       {"p": [0], "m": [2.5]}),
    _t("asyncpipe.formulas.row", dict(name="1f1b", p=4, m=8), {"m": [-1]}),
    _t("asyncpipe.table", dict(p=4, m=8), {"p": [0], "m": [NAN], "names": [("bogus",), ()]}),
    _t("asyncpipe.train", dict(labels=("synchronous",), steps=8, lrs=(0.05,), width=4, rows=2,
                               seeds=(0,)),
       {"steps": [0], "lrs": [(-0.1,)], "width": [2.5], "rows": [-1], "momentum": [-0.5],
        "warmup": [-1], "seeds": [(), (-1,)], "steep": [NAN]}),
    _t("asyncpipe.draw.version_colours", dict(versions=4), {"versions": [0, -1, 10**9]}),
    _t("asyncpipe.spread.table", dict(results=None), {}),
    _t("asyncpipe.explore.render_zoo", dict(name="pipedream", stages=4, microbatches=8),
       {"name": ["bogus"], "split": ["yes"]}),
    # context parallelism (chapter 9)
    _t("context.plan", dict(scheme="ring", sequence=1024, heads=8, hidden=512, devices=8),
       {"batch": [0], "dtype": ["x"], "training": [1]}),
    _t("context.causal_work", dict(devices=8), {"devices": [0], "layout": ["zig"]}),
    _t("context.zigzag_order", dict(sequence=64, devices=8),
       {"sequence": [63, -64], "devices": [0]}),
    _t("context.check_sizes", dict(scheme="ring", sequence=64, heads=8, devices=8),
       {"scheme": ["bogus"], "hidden": [-8]}),
    _t("context.compare.flops", dict(sequence=1024, hidden=512, devices=8),
       {"batch": [-1], "causal": ["no"]}),
    _t("context.compare.memory", dict(scheme="ring", sequence=1024, heads=8, hidden=512,
                                      devices=8),
       {"devices": [0], "batch": [NAN]}),
    _t("context.inputs", dict(scheme="ring", sequence=16, heads=8),
       {"batch": [0], "head_dim": [-8], "seed": [-1]}),
    _t("context.mesh_of", dict(devices=8), {"devices": [0], "axis": [""]}),
    _t("context.temporaries", dict(scheme="ring", sequence=64, heads=8),
       {"sequence": [-16], "causal": ["True"]}),
    _t("context.balance.flops_per_device", dict(sequence=64, heads=2),
       {"devices": [0], "layout": ["bogus"]}),
    _t("context.balance.imbalance", dict(flops=[1.0, 2.0]), {"flops": [[], [0.0, 0.0]]}),
    _t("context.draw.scaling", dict(sequences=[1024, 2048], heads=8, hidden=512, devices=8),
       {"sequences": [[], [-1]]}),
    _t("context.render_context", dict(sequence=4096),
       {"sequence": [-1], "scheme": ["bogus"], "system": ["x"]}),
    # expert parallelism (chapter 10)
    _t("moe.capacity", dict(tokens=4096, experts=32, top_k=2, capacity_factor=1.25),
       {"tokens": [-1], "experts": [0], "top_k": [33, 0], "capacity_factor": [NAN, -1.0, 0.0]}),
    _t("moe.plan", dict(tokens=4096, experts=32, top_k=2, capacity_factor=1.25, devices=8),
       {"devices": [3], "hidden": [0]}),
    _t("moe.skewed_logits", dict(tokens=64, experts=8), {"skew": [NAN], "seed": [-3]}),
    _t("moe.softmax", dict(logits=_ones(4, 4)), {"logits": [_full((4, 4), NAN)]}),
    _t("moe.route", dict(logits=_ones(8, 4), top_k_=2, capacity_factor=1.25),
       {"top_k_": [0, 5], "capacity_factor": [NAN], "groups": [3], "order": ["after?"]}),
    _t("moe.keep", dict(experts=_ints([[0, 1], [2, 3]]), num_experts=4, capacity=1),
       {"experts": [_ints([[0, 9]])], "capacity": [-1]}),
    _t("moe.top_k", dict(logits=_ones(4, 4), k=2),
       {"k": [0, 5], "order": ["bogus"], "probs": [_ones(2, 2)]}),
    _t("moe.aux_loss", dict(probs=_full((4, 4), 0.25), experts=_ints([[0], [1], [2], [3]])),
       {"weight": [-1.0, NAN], "experts": [_ints([[0], [1]])]}),
    _t("moe.init", dict(hidden=8, ffn=16, experts=4), {"hidden": [0], "experts": [-2]}),
    _t("moe.render_moe", dict(experts=8, tokens=256, hidden=64, ffn=128),
       {"experts": [0], "top_k": [0], "capacity_factor": [INF], "devices": [7],
        "tokens": [-1]}),
    _t("moe.check", dict(tokens=64, experts=8, top_k=2, capacity_factor=1.25),
       {"devices": [3]}),
    # putting it together (chapter 11)
    _t("together.activation_bytes", dict(seq=2048, batch=1, hidden=4096, heads=32),
       {"seq": [-1], "batch": [0], "heads": [NAN], "recompute": ["some"],
        "sequence_parallel": ["true"]}),
    _t("together.plan", dict(model="GPT-3 13B", cluster="A100 80GB (Selene)", t=8, p=2, d=4),
       {"t": [0, 3], "p": [-2], "d": [2.5], "microbatch": [0], "zero_stage": [4, "1"],
        "recompute": ["partial"], "sequence_parallel": ["no"], "efficiency": [0.0, NAN, -0.5],
        "context": [0], "model": ["GPT-5"], "cluster": ["TPU"]}),
    _t("together.best", dict(model="GPT-3 13B", cluster="A100 80GB (Selene)", gpus=64),
       {"gpus": [0, 10**9]}),
    _t("together.candidates", dict(model="GPT-3 13B", cluster="A100 80GB (Selene)", gpus=64),
       {"microbatches": [()], "max_tensor": [0]}),
    _t("together.Model", dict(name="m", layers=4, hidden=256, heads=8),
       {"layers": [-1], "hidden": [0], "heads": [2.5], "gated": ["no"]}),
    _t(lambda **k: _f("together.MODELS")["GPT-3 13B"].flops_per_token(**k), dict(),
       {"training": ["yes"]}),
    _t("together.render_together", dict(),
       {"tensor": [0], "pipeline": [-1], "data": [2.5], "zero_stage": [9]}),
    # automatic parallelization (chapter 12)
    _t("autoshard.mlp", dict(batch=64, hidden=16, ffn=64),
       {"batch": [0], "layers": [0], "dtype": ["float3"]}),
    _t("autoshard.transformer", dict(tokens=64, hidden=16, ffn=64, heads=4),
       {"heads": [0, 3]}),
    _t("autoshard.Builder", dict(x=(8, 8)), {"x": [(8, 0), (8.5, 8), (8,)]}),
    _t(lambda **k: _f("autoshard.Builder")(x=(8, 16)).matmul(**k),
       dict(name="h", x="x", features=32), {"x": ["missing"], "features": [0]}),
    _t(lambda **k: _f("autoshard.solve")(_f("autoshard.mlp")(64, 16, 64), **k),
       dict(mesh_shape={"X": 4}, system="H100 (NVLink)"),
       {"mesh_shape": [{"X": 0}], "system": ["bogus"], "memory_limit": [-1.0, NAN]}),
    _t("autoshard.layouts", dict(shape=(8, 8), mesh_shape={"X": 2}),
       {"shape": [(-8, 8)], "mesh_shape": [{}]}),
    _t("autoshard.reshard", dict(shape=(64, 64), src="A[I_X, J]", dst="A[I, J_X]",
                                 mesh_shape={"X": 4}),
       {"dst": ["A[I, J_Q]"], "dtype": ["x"]}),
    _t("autoshard.stages", dict(layer_costs=[1.0, 2.0], devices=2, microbatches=4,
                                submeshes=[(1,)]),
       {"devices": [0], "submeshes": [[], [(0,)]], "layer_costs": [[NAN]],
        "microbatches": [-4]}),
    _t("autoshard.switch_batch", dict(hidden=512, ffn=2048, mesh_shape={"X": 8},
                                      system="H100 (NVLink)"),
       {"hidden": [0], "largest": [-1]}),
    _t("autoshard.render_autoshard", dict(batch=1024, hidden=512),
       {"mesh": ["0"], "bandwidth_gbs": [-450.0], "batch": [0], "limit_gib": [-1.0]}),
    # the cross-process command (refused before any process starts)
    _t("cluster.run_checks", dict(processes=2, topics=()),
       {"processes": [0], "devices_per_process": [-1], "topics": [("nope",)],
        "timeout": [-1.0]}),
    _t("cluster.run_script", dict(script="/nonexistent/x.py"), {}),
    # PyTorch's orders read as tpviz plans (chapter 13, no torch needed)
    _t("pytorch.plan.parse", dict(action="0F0"), {"action": ["", "0F", "xF0"]}),
    _t("pytorch.plan.compare", dict(torch_name="Schedule1F1B", order={0: ["0F0"]},
                                    microbatches=1),
       {"torch_name": ["ScheduleBogus"], "microbatches": [0]}),
    _t("pytorch.plan.fsdp_plan", dict(params=10**6, devices=4, units=2,
                                      reshard_after_forward=True),
       {"params": [-1], "devices": [0], "units": [0], "reshard_after_forward": ["yes"],
        "param_bytes": [0]}),
    _t("pytorch.plan.ops_of", dict(order={0: ["0F0"]}), {"order": [{0: [5]}]}),
]
# good calls that only exist to carry bad ones (no good call of their own)
NO_GOOD = {"asyncpipe.spread.table", "cluster.run_script", "cluster.run_checks"}


def _cli(argv):
    """``python -m tpviz.cluster`` with ``argv``: argparse's usage error is clear."""
    from tpviz.cluster.__main__ import main
    from tpviz.errors import ArgumentError

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            main(list(argv))
    except SystemExit as e:
        if e.code == 2 and "error:" in err.getvalue():
            raise ArgumentError(err.getvalue().strip().splitlines()[-1]) from None
        raise
    return "ran"


def _whole():
    """Calls bad as a whole: (label, call, word)."""
    import numpy as np

    from tpviz import exercises

    out = [
        ("cluster --script ''", lambda: _cli(["--script", ""]), "script"),
        ("cluster --script '' --processes 1", lambda: _cli(["--script", "", "--processes", "1"]),
         "script"),
        ("cluster --topics ''", lambda: _cli(["--topics", ""]), "topics"),
        ("cluster --processes 1.5", lambda: _cli(["--processes", "1.5"]), "processes"),
        ("cluster --timeout inf", lambda: _cli(["--timeout", "inf"]), "timeout"),
        ("moe.keep float experts", lambda: _f("moe.keep")(np.array([[0.5, 1.0]]), 4, 1),
         "experts"),
        ("moe.top_k 1-D logits", lambda: _f("moe.top_k")(np.ones(4), 2), "logits"),
        ("context.combine wrong lse", lambda: _f("context.combine")(
            np.ones((2, 4, 8)), np.ones((2, 4)), np.ones((2, 4, 8)), np.ones((2, 3))), "lse"),
        ("context.attention None", lambda: _f("context.attention")(None, None, None), "q"),
        ("megatron.mlp strings", lambda: _f("megatron.mlp")("x", "w1", "w2"), "x"),
        ("pipeline.draw.gantt of a schedule", lambda: _f("pipeline.draw.gantt")(
            _f("pipeline.schedule")("1f1b", 4, 8)), "t"),
        ("mesh2d.describe of None", lambda: _f("mesh2d.describe")(None), "p"),
        ("zero.draw.memory_bars huge devices", lambda: _f("zero.draw.memory_bars")(1e9, 10**12),
         "devices"),
        ("layouts.draw.array of a list", lambda: _f("layouts.draw.array")([[1, 2], [3, 4]]),
         "x"),
        ("asyncpipe.spread.wins unknown label", lambda: _f("asyncpipe.spread.wins")({}, "a", "b"),
         "a"),
        ("pipeline.simulate of a list", lambda: _f("pipeline.simulate")([]), "sched"),
        ("megatron.draw.mlp of None", lambda: _f("megatron.draw.mlp")(None), "p"),
        ("autoshard.draw.stages of None", lambda: _f("autoshard.draw.stages")(None), "plan"),
        ("moe.draw.routing of None", lambda: _f("moe.draw.routing")(None, 8), "r"),
        ("core.compiled.collectives of a string", lambda: _f("core.compiled.collectives")(
            "f", 1), "program"),
    ]
    for name, answer in (("check_bubble", "0.2"), ("check_bubble", -0.1),
                         ("check_microbatches", 2.5), ("check_tp_degree", "8"),
                         ("check_zero_memory", {"bogus": 1}), ("check_capacity", NAN),
                         ("check_crossover", INF), ("check_weight_versions", []),
                         ("check_holders", [0, 0, 1, 1]), ("check_ring_bytes", -1)):
        out.append((f"{name}({answer!r})", lambda n=name, a=answer: getattr(exercises, n)(a),
                    "✗"))
    return out


def inputs():
    """Every bad input as (label, call, word), and the good calls as (label, call)."""
    bad, good = [], []
    for path, ok, table in TABLE:
        fn_label = path if isinstance(path, str) else f"<call>{sorted(ok) or ''}"
        if isinstance(path, str) and "lambda" not in fn_label:
            def fn(*a, _p=path, **k):
                return (_f(_p) if _p != "make_mesh" else _make_mesh())(*a, **k)
        else:
            fn = path
        if fn_label not in NO_GOOD:
            good.append((f"{fn_label}(good)", lambda fn=fn, ok=ok: fn(**ok)))
        for arg, values in table.items():
            for value in values:
                label = f"{fn_label}({arg}={_short(value)})"
                bad.append((label, lambda fn=fn, kw={**ok, arg: value}: fn(**kw), arg))
    bad.extend(_whole())
    return bad, good


def _make_mesh():
    import tpviz

    return tpviz.make_mesh


def _short(value) -> str:
    text = repr(value)
    if "array(" in text:
        text = f"array{getattr(value, 'shape', '')}"
    return text if len(text) < 50 else text[:47] + "..."


# --- running them ----------------------------------------------------------------------------

def _child(conn, start: int, cap_bytes: int) -> None:
    """Run inputs from ``start`` on, reporting (index, 'begin') and (index, kind, message)."""
    import resource

    import tpviz

    tpviz.setup_devices(8, verbose=False)
    from tpviz.core.exercises import ExerciseFailed
    from tpviz.errors import TpvizError

    bad, _good = inputs()
    _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    used = _data_bytes()
    resource.setrlimit(resource.RLIMIT_DATA, (used + cap_bytes, hard))
    for i in range(start, len(bad)):
        _label, call, word = bad[i]
        conn.send((i, "begin", ""))
        begin = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                result = call()
        except MemoryError as e:
            conn.send((i, "oom", f"MemoryError {e}"[:160]))
            continue
        except ExerciseFailed as e:
            conn.send((i, "clear", str(e).splitlines()[0][:160]))
            continue
        except (TpvizError, ValueError, TypeError, Exception) as e:
            took = time.perf_counter() - begin
            text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
            if isinstance(e, TpvizError) and isinstance(e, ValueError | TypeError):
                named = word.lower() in str(e).lower()
                kind = "clear" if named and took <= 2 else "cryptic"
                conn.send((i, kind, f"{took:.2f} s {text}"))
            else:
                conn.send((i, "raw", text))
            continue
        except BaseException as e:  # SystemExit and friends
            conn.send((i, "raw", f"{type(e).__name__}: {e}"[:160]))
            continue
        said = out.getvalue()
        if word == "✗" and "✗" in said:
            conn.send((i, "clear", said.strip()[:160]))
        else:
            conn.send((i, "silent", f"returned {result!r:.100}"))
    conn.send((None, "done", ""))


def _data_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def run_all(limit: float, cap_bytes: int) -> dict[int, tuple[str, str]]:
    bad, _ = inputs()
    results: dict[int, tuple[str, str]] = {}
    start = 0
    ctx = mp.get_context("spawn")
    while start < len(bad):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(child, start, cap_bytes), daemon=True)
        proc.start()
        current, began = None, time.perf_counter()
        startup = 120.0
        while True:
            wait = (startup if current is None else limit) - (time.perf_counter() - began)
            if parent.poll(max(wait, 0)):
                try:
                    i, kind, message = parent.recv()
                except EOFError:
                    i, kind = None, "died"
                if kind == "done":
                    start = len(bad)
                    break
                if kind == "died":
                    results[current] = ("oom", f"the process died (exit {proc.exitcode})")
                    start = current + 1
                    break
                if kind == "begin":
                    current, began = i, time.perf_counter()
                else:
                    results[i] = (kind, message)
                continue
            if not proc.is_alive() or current is not None:
                if current is None:
                    raise RuntimeError("the probe's child did not start")
                kind = "hang" if proc.is_alive() else "oom"
                results[current] = (kind, f"still running after {limit} s" if kind == "hang"
                                    else f"the process died (exit {proc.exitcode})")
                proc.kill()
                start = current + 1
                break
        proc.join(5)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=20.0)
    parser.add_argument("--cap-gib", type=float, default=2.0)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--good", action="store_true", help="run only the good calls")
    args = parser.parse_args(argv)
    if args.good:
        import tpviz

        tpviz.setup_devices(8, verbose=False)
        _, good = inputs()
        failed = 0
        for label, call in good:
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    call()
            except Exception as e:  # report every failing good call
                failed += 1
                print(f"GOOD CALL FAILED {label}: {type(e).__name__}: {e}"[:300])
        print(f"{len(good)} good calls, {failed} failed")
        return int(failed > 0)
    bad, _ = inputs()
    results = run_all(args.limit, int(args.cap_gib * 2**30))
    counts = Counter(kind for kind, _ in results.values())
    for i, (label, _call, _word) in enumerate(bad):
        kind, message = results.get(i, ("missing", ""))
        if args.verbose or kind != "clear":
            print(f"{kind:8} {label}: {message}")
    total = len(bad)
    print(f"\n| inputs | clear | cryptic | raw traceback | silently accepted | hang | out of "
          f"memory |\n|---|---|---|---|---|---|---|\n| {total} | {counts['clear']} "
          f"({counts['clear'] / total:.1%}) | {counts['cryptic']} | {counts['raw']} | "
          f"{counts['silent']} | {counts['hang']} | {counts['oom']} |")
    return 0 if counts["clear"] == total else 1


if __name__ == "__main__":
    sys.exit(main())
