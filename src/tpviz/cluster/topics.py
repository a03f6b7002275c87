"""The check each chapter runs, per topic, at the chapter's sizes (small: seconds each).

Each function runs its chapter's ``check`` calls (which compare with the single-device
reference and raise :class:`~tpviz.errors.CheckFailed` on any difference) and returns what they
measured, by name: compiled collectives, memory analyses, losses. The values the checks compare
are collected by :func:`tpviz.core.verify.recording` around the call. The same functions run in
one process and across processes; :mod:`tpviz.cluster.compare` puts the two side by side.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.core import compiled, verify
from tpviz.devices import chosen_devices, make_mesh, spread, using


def layouts() -> dict:
    """Chapter 0: blocks sit where the plan says (shard by shard), bytes per device, and a
    ``psum`` of rows: one all-reduce, equal to ``x.sum(0)``."""
    from tpviz import layouts as topic

    mesh = make_mesh((2, 4), ("X", "Y"))
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    placed = jax.device_put(x, NamedSharding(mesh, P("X", "Y")))
    position = {d: i for i, d in enumerate(mesh.devices.flat)}
    plan = topic.blocks(x.shape, P("X", "Y"), dict(mesh.shape))
    for shard in placed.addressable_shards:  # only this process's: compared where they are
        (block,) = [b for b in plan if position[shard.device] in b.devices]
        verify.require(np.array_equal(np.asarray(shard.data), x[block.slices]),
                       f"the block on {shard.device} is not x{block.slices}")
    held = {}
    for text in ("A[I_X, J_Y]", "A[I_XY, J]", "A[I, J]"):
        spec = topic.parse(text).spec
        measured = {s.data.nbytes for s in jax.device_put(x, NamedSharding(mesh, spec))
                    .addressable_shards}
        verify.same(measured, {topic.bytes_per_device(x.shape, x.dtype, spec, dict(mesh.shape))},
                    f"bytes per device of {text}")
        held[text] = measured.pop()
    mesh8 = make_mesh((8,), ("X",))
    column_sums = compiled.compile_for(jax.shard_map(
        lambda block: jax.lax.psum(block, "X"), mesh=mesh8, in_specs=P("X"), out_specs=P()), x)
    verify.close(column_sums(x), x.sum(axis=0, keepdims=True), "the column sums")
    found = compiled.collectives(column_sums)
    verify.same([(c.kind, c.bytes, c.group_size) for c in found], [("all-reduce", 64, 8)],
                "the column sums' collectives")
    return {"bytes per device": held, "column sums": found}


def collectives() -> dict:
    """Chapter 1: both data-parallel steps, and the ring and halving-doubling all-reduces
    written with ``ppermute``, against ``psum``."""
    from tpviz import collectives as topic
    from tpviz.collectives.plan import plan
    from tpviz.collectives.run import init_mlp

    mesh = make_mesh((8,), ("X",))
    rng = np.random.default_rng(0)
    params = init_mlp(0, (8, 32, 4))
    x = rng.normal(size=(32, 8)).astype(np.float32)
    y = rng.normal(size=(32, 4)).astype(np.float32)
    out = {"data parallel": topic.check_dp(mesh, params, x, y)}
    xs = rng.normal(size=(8 * 1024,)).astype(np.float32)
    for name in ("ring", "halving-doubling"):
        out[name] = topic.check_plan(plan(name, "all-reduce", 8, 1024 * 4), mesh, xs)
    return out


def matmul() -> dict:
    """Chapter 3: the four cases of ``In · W1`` on a 2 x 4 mesh."""
    from tpviz import matmul as topic

    mesh = make_mesh((2, 4), ("X", "Y"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 32), dtype=np.float32)
    w = rng.standard_normal((32, 64), dtype=np.float32)
    cases = {"case 1": ("In[B_X, D]", "W1[D, F_Y]", False),
             "case 2": ("In[B_X, D_Y]", "W1[D, F]", False),
             "case 3": ("In[B_X, D_Y]", "W1[D_Y, F]", False),
             "case 3, reduce-scatter": ("In[B_X, D_Y]", "W1[D_Y, F]", True)}
    return {name: topic.check(topic.plan(x.shape, w.shape, a, b, dict(mesh.shape),
                                         reduce_scatter=rs), mesh, x, w)
            for name, (a, b, rs) in cases.items()}


def megatron() -> dict:
    """Chapter 4: the Megatron MLP and transformer block on 4 devices."""
    from tpviz import megatron as topic

    mesh = make_mesh((4,), ("model",), devices=chosen_devices()[:4])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 32), dtype=np.float32)
    target = rng.standard_normal((2, 8, 32), dtype=np.float32)
    params = topic.init(hidden=32, ffn=128)
    mlp = {"w1": params["w1"], "w2": params["w2"]}
    return {"mlp": topic.check("mlp", mesh, x, target, mlp),
            "block": topic.check("block", mesh, x, target, params, head_dim=8)}


def zero() -> dict:
    """Chapter 5: the compiled steps of ZeRO stages 0-3 (memory, collectives), and 3 Adam steps
    of each against one device."""
    from tpviz import zero as topic

    out = {f"stage {s}": topic.measure(s, layers=4, width=256) for s in range(4)}
    for s in range(4):
        topic.check.train(s, layers=4, width=30, steps=3)
    return out


def mesh2d() -> dict:
    """Chapter 6: the 2D MLP on the chapter's 4 x 2 (data, model) mesh and on 8 x 1."""
    from tpviz import mesh2d as topic

    rng = np.random.default_rng(0)
    b, h1, h2 = 16, 8, 32
    x = rng.standard_normal((b, h1), dtype=np.float32)
    w1 = rng.standard_normal((h1, h2), dtype=np.float32) / 3
    w2 = rng.standard_normal((h2, h1), dtype=np.float32) / 6
    dy = rng.standard_normal((b, h1), dtype=np.float32)
    return {f"{d} x {m}": topic.check(make_mesh((d, m), ("data", "model")), x, w1, w2, dy)
            for d, m in ((4, 2), (8, 1))}


def pipeline() -> dict:
    """Chapter 7: GPipe and 1F1B as one SPMD program on 4 stages of 8 microbatches."""
    from tpviz import pipeline as topic

    return {name: topic.spmd_check(name, 4, 8) for name in ("gpipe", "1f1b")}


def asyncpipe() -> dict:
    """Chapter 8: the chapter's runs, the 4-stage MLP trained with each schedule's weight
    versions (one program on 4 devices, called once per run; seed 0 of the chapter's five), at
    the chapter's larger learning rate and for 96 steps, not 300: each step's sends between
    stages cross processes, and each run's losses (every step's, brought home by
    ``verify.host``, which records them) are compared with one process's. The chapter's claims
    about the curves are asserted in every seed by the chapter and tests/test_asyncpipe.py."""
    from tpviz.asyncpipe import stale

    results = stale.train(steps=96, lrs=(0.2,), seeds=(0,))
    return {"final loss": {k: float(c.finals[0]) for k, c in results[0.2].items()},
            "collectives": compiled.collectives(results.program),
            "memory": compiled.memory(results.program)}


def context() -> dict:
    """Chapter 9: sequence parallelism, the ring (causal, zigzag) and Ulysses (causal) on 8
    devices against full attention on one device, forward and gradients, and their compiled
    collectives against the plan: the chapter's three checks."""
    from tpviz import context as topic

    out = {}
    for scheme, heads, causal in (("sequence", 8, False), ("ring", 4, True),
                                  ("ulysses", 8, True)):
        found = topic.check(scheme, sequence=64, heads=heads, devices=8, causal=causal)
        out[scheme] = {"forward": list(found), "train": found.train, "layout": found.layout}
    return out


def moe() -> dict:
    """Chapter 10: a top-2 MoE layer of 8 experts on 8 devices, by all-to-alls and GSPMD."""
    from tpviz import moe as topic

    return {"top-2 of 8": topic.check(tokens=64, experts=8, top_k=2, capacity_factor=1.0)}


def together() -> dict:
    """Chapter 11: one training step on a (data, pipeline, tensor) = 2 x 2 x 2 mesh (2 layers,
    one per stage, to keep the unrolled program small; the chapter's has 4)."""
    from tpviz.together.check import check_run
    from tpviz.together.run import AXES, Config

    return {"3D step": check_run(make_mesh((2, 2, 2), AXES), Config(layers=2))}


def autoshard() -> dict:
    """Chapter 12: the solver's strategies executed on 8 devices and on a 4 x 2 mesh."""
    from tpviz import autoshard as auto

    h100 = "H100 (NVLink)"
    mesh8 = make_mesh((8,), ("X",))
    mt = auto.solve(auto.mlp(1024, 8192, 32768, layers=2, dtype="bf16"), {"X": 8}, h100)
    small = auto.same_strategies(mt, auto.mlp(64, 256, 1024, layers=2))
    two_d = auto.solve(auto.mlp(65536, 8192, 32768, layers=2, dtype="bf16"),
                       {"data": 4, "model": 2}, h100)
    small2d = auto.same_strategies(two_d, auto.mlp(64, 256, 1024, layers=2))
    return {"forward": auto.execute(small.problem.graph, small, mesh8),
            "training": auto.execute(small.problem.graph, small, mesh8, training=True),
            "4 x 2": auto.execute(small2d.problem.graph, small2d,
                                  make_mesh((4, 2), ("data", "model")))}


def inference() -> dict:
    """Chapter 14: a decode step of the small transformer on 8 devices, its KV cache split by
    key/value heads (GQA: 2 of them, kept 4 times over), by batch and along the sequence; 4
    greedy tokens each against decoding on one device, and the compiled step's collectives and
    bytes per device against the plan: the chapter's three checks."""
    from tpviz import inference as topic

    out = {}
    for scheme in topic.SCHEMES:
        found = topic.check(scheme, devices=8, steps=4)
        out[scheme] = {"collectives": list(found), "tokens": found.tokens,
                       "cache bytes": found.cache_bytes}
    return out


# topic -> its chapter's check; meshes of 4 devices take them from every process in turn
CHECKS = {"layouts": layouts, "collectives": collectives, "matmul": matmul,
          "megatron": megatron, "zero": zero, "mesh2d": mesh2d, "pipeline": pipeline,
          "asyncpipe": asyncpipe, "context": context, "moe": moe, "together": together,
          "autoshard": autoshard, "inference": inference}
SPREAD = {"megatron", "pipeline", "asyncpipe"}  # 4-device meshes: devices of every process


def run(topic: str) -> tuple[dict, list[np.ndarray]]:
    """Run one topic's check; return what it measured and every value it compared."""
    devices = spread(chosen_devices()) if topic in SPREAD else chosen_devices()
    with using(devices), verify.recording() as values:
        found = CHECKS[topic]()
    return found, values
