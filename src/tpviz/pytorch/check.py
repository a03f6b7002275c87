"""Launch the workers, compare every run with its one-process reference, and compare what
torch did (the schedules' op orders, the collectives it issued, the bytes of its shards) with
tpviz's plans. Each function raises :class:`~tpviz.errors.CheckFailed` on a difference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from tpviz.core import launch as launcher
from tpviz.core.verify import close, require, same
from tpviz.pytorch import plan, run, shard, split


@dataclass
class Report:
    """What a check found: errors against one process, comparisons, seconds of the launch."""

    errors: dict[str, float] = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    seconds: float = 0.0
    skipped: dict[str, str] = field(default_factory=dict)  # what did not run, and why


def launch_timed(worker, world: int, *args, timeout: float):
    """:func:`tpviz.core.launch.launch` (its server warmed with the topic's imports) and the
    seconds it took, start-up included."""
    launcher.warm(*plan.PRELOAD)  # once per session
    start = time.perf_counter()
    out = launcher.launch(worker, world, *args, timeout=timeout)
    return out, time.perf_counter() - start


def seed(timeout: float = 120.0, sweep: dict | None = None) -> Report:
    """The seed's ToyModel split over 2 processes, and its ``split_size`` pipeline timed at
    several ``split_size`` (:func:`tpviz.pytorch.split.sweep`; ``sweep``: its arguments)."""
    ranks, seconds = launch_timed(run.seed_all, 2, sweep, timeout=timeout)
    return judge_seed(ranks, seconds)


def judge_seed(ranks: list, seconds: float = 0.0) -> Report:
    """Compare the results of :func:`tpviz.pytorch.run.seed_all` with one process; the sweep's
    gradients at every ``split_size`` too (within 1e-5 of one process's)."""
    r0, r1 = ranks
    ref = run.toy_reference()
    rep = Report(seconds=seconds)
    got = {**r0["toy"], **r1["toy"]}
    for key in ref:
        rep.errors[f"toy {key}"] = close(got[key], ref[key], f"ToyModel split: {key}")
    sweep = split.summary([r0["sweep"], r1["sweep"]])
    for size, row in sweep.items():
        if size != "one process":
            require(row["error"] <= 1e-5, f"split_size={size}: the gradients differ from one "
                    f"process's by {row['error']:.1e} (relative)")
            rep.errors[f"split_size={size} grads"] = row["error"]
    rep.results["sweep"] = sweep
    # the Gantt chart's run: 8 chunks (else the most), the repetition of median step time
    size = 8 if 8 in sweep else min(k for k in sweep if k != "one process")
    rep.results["split_size"] = size
    rep.results["spans"] = sweep[size]["spans"][int(np.argsort(sweep[size]["wall"])[
        len(sweep[size]["wall"]) // 2])]
    return rep


def schedules(world: int = 4, microbatches: int = 8, timeout: float = 180.0) -> Report:
    """Every schedule this torch has, on ``world`` processes: loss and gradients against one
    process; torch's ``pipeline_order`` and the order its stages really ran against tpviz's."""
    ranks, seconds = launch_timed(run.pipelining, world, None, microbatches, timeout=timeout)
    rep = judge_schedules(ranks, microbatches, seconds)
    rep.skipped = {k: v for k, v in plan.runnable_schedules()[1].items()}
    return rep


def judge_schedules(ranks: list, microbatches: int = 8, seconds: float = 0.0) -> Report:
    """Compare the results of :func:`tpviz.pytorch.run.pipelining` with one process and
    tpviz's schedules."""
    world = len(ranks)
    ref = run.mlp_reference()
    rep = Report(seconds=seconds)
    for name in ranks[0]:
        grads = {k: v for r in ranks for k, v in r[name]["grads"].items()}
        (loss,) = [r[name]["loss"] for r in ranks if r[name]["loss"] is not None]
        rep.errors[f"{name} loss"] = close(loss, ref["loss"], f"{name}: loss")
        rep.errors[f"{name} grads"] = close(grads, ref["grads"], f"{name}: gradients")
        order = {r: ranks[r][name]["order"].get(r, []) for r in range(world)}
        ran = {r: ranks[r][name]["ran"] for r in range(world)}
        rep.results[name] = {"order": plan.compare(name, order, microbatches),
                             "ran": plan.compare(name, ran, microbatches)}
    return rep


def sharding(world: int = 4, timeout: float = 120.0) -> Report:
    """FSDP2 and DTensor on ``world`` processes: gradients and outputs against one process;
    the local shards' bytes and the collectives of a step against the plans."""
    ranks, seconds = launch_timed(shard.sharding_all, world, timeout=timeout)
    return judge_sharding(ranks, seconds)


def judge_sharding(ranks: list, seconds: float = 0.0) -> Report:
    """Compare the results of :func:`tpviz.pytorch.shard.sharding_all` with one process and
    the plans (tpviz.zero stage 3; Megatron's f and g)."""
    world = len(ranks)
    rep = Report(seconds=seconds)
    ref = shard.fsdp_reference()
    units = len(shard.fsdp_model())
    for raf in (True, False):
        got = ranks[0]["fsdp"][raf]
        want = plan.fsdp_plan(ref["params"], world, units, raf, ref["param_bytes"])
        rep.errors[f"fsdp raf={raf} grads"] = close(got["grads"], ref["grads"],
                                                     f"FSDP2 (reshard_after_forward={raf})")
        for r, each in enumerate(ranks):
            same(each["fsdp"][raf]["local_bytes"], want["param_bytes"],
                 f"FSDP2 rank {r}'s parameter bytes (tpviz.zero stage 3)")
        kinds = {k: got["collectives"].get(k, 0) for k in ("all-gather", "reduce-scatter")}
        same(kinds, {k: want[k] for k in kinds}, f"FSDP2 (reshard_after_forward={raf}) "
             "collectives of one step")
        rep.results[f"fsdp {raf}"] = {"bytes": [e["fsdp"][raf]["local_bytes"] for e in ranks],
                                      "plan": want, "collectives": got["collectives"]}
    ref = shard.tp_reference()
    for name in ranks[0]["tp"]:
        rs = [r["tp"][name] for r in ranks]
        join = shard.gather_tokens if rs[0]["sharded_in"] else (lambda parts: parts[0])
        rep.errors[f"{name} out"] = close(join([r["out"] for r in rs]), ref["out"],
                                          f"{name}: output")
        rep.errors[f"{name} grads"] = close(
            {"x": join([r["x_grad"] for r in rs]), **rs[0]["grads"]},
            {"x": ref["x_grad"], **ref["grads"]}, f"{name}: gradients")
        rep.results[name] = {"forward": rs[0]["forward"], "backward": rs[0]["backward"]}
    same(rep.results["megatron"], plan.MEGATRON_MLP,
         "DTensor Megatron MLP: collectives per step (chapter 4's f and g)")
    return rep
