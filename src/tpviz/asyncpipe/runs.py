"""Which weight version every op of a staleness run reads (chapter 8's training runs).

A run is a schedule of :mod:`tpviz.pipeline` (its simulated timeline gives the versions) with
PipeMare's fixes or none, or a *controlled* run that sets each stage's delay by hand: the
tables here feed :func:`tpviz.asyncpipe.stale.train`.
"""

from __future__ import annotations

import numpy as np

from tpviz.core.kinds import HELD, Items, Of, Size
from tpviz.core.validate import integer
from tpviz.errors import ArgumentError
from tpviz.pipeline import schedule, simulate

STAGES = 4
#: the runs of the chapter: label -> (schedule whose versions are read, PipeMare fixes)
RUNS = {"synchronous": ("sync", ()), "synchronous, 4 per update": ("flush", ()),
        "PipeDream": ("pipedream", ()), "2BW": ("2bw", ()),
        "AMPNet = PipeMare, no fixes": ("ampnet", ()),
        "PipeMare + LR rescheduling": ("pipemare", ("lr",)),
        "PipeMare + both fixes": ("pipemare", ("lr", "predict"))}
#: controlled runs: label -> (delay of stage s in updates, microbatches per update); the
#: forward and the backward of stage s read version ``newest - delay_s`` (stashed)
CONTROLS = {"delay 1 on every stage": ((1, 1, 1, 1), 1),
            "delay 1 on the last stage only": ((0, 0, 0, 1), 1),
            "2BW, last stage fresh": ((1, 1, 1, 0), STAGES),
            "2BW, last stage only stale": ((0, 0, 0, 1), STAGES),
            "delay 3 on the first stage only": ((3, 0, 0, 0), 1),
            "delay 3 on the last stage only": ((0, 0, 0, 3), 1)}


def versions(name: Of(str, Items), steps: Size(2**16, HELD), stages: Size(64, HELD) = STAGES
             ) -> tuple[np.ndarray, np.ndarray, int]:
    """(forward version, backward version) of every (step, stage), and microbatches per update,
    read off the simulated timeline of schedule ``name`` ("sync": the newest version, one
    update per microbatch; "flush": the newest, one update per p microbatches); or, for
    ``name`` = (delays, per_update) of :data:`CONTROLS`, the newest minus stage s's delay."""
    if not isinstance(name, str):
        if len(name) != 2 or not isinstance(name[0], tuple | list) or len(name[0]) != stages:
            raise ArgumentError(f"name = {name!r}: give a schedule's name or (delays, "
                                f"per_update) with one delay per stage ({stages}), as in "
                                f"CONTROLS.")
        delays = tuple(integer(f"name[0][{i}]", d, minimum=0) for i, d in enumerate(name[0]))
        per_update = integer("name[1]", name[1])
        newest = np.arange(steps)[:, None] // per_update
        read = np.maximum(newest - np.asarray(delays)[None, :], 0)
        return read, read, per_update
    if name in ("sync", "flush"):  # flush: GPipe / 1F1B steps of m = p microbatches
        per_update = stages if name == "flush" else 1
        newest = np.repeat(np.arange(steps)[:, None] // per_update, stages, axis=1)
        return newest, newest, per_update
    t = simulate(schedule(name, stages, steps), 1.0, 2.0)
    fwd, bwd = np.zeros((steps, stages), int), np.zeros((steps, stages), int)
    for d in range(stages):
        for op, v in zip(t.schedule.ops[d], t.versions[d], strict=True):
            (fwd if op.kind == "F" else bwd)[op.microbatch, d] = v
    return fwd, bwd, stages if name == "2bw" else 1


def per_update(label: str) -> int:
    """Microbatches per update of run ``label`` (4 for 2BW and its controls, else 1)."""
    if label in CONTROLS:
        return CONTROLS[label][1]
    return STAGES if RUNS[label][0] in ("flush", "2bw") else 1


def reference(label: str) -> str:
    """The synchronous run of the same rhythm (microbatches per update) as run ``label``."""
    return "synchronous, 4 per update" if per_update(label) > 1 else "synchronous"


def tables(label: str, steps: int, lr: float, warmup: int):
    """Per (step, stage): forward and backward versions, microbatches per update at the steps
    that update (else 0), learning rate, PipeMare's prediction lag; the two delays."""
    name, fixes = RUNS[label] if label in RUNS else (CONTROLS[label], ())
    fwd, bwd, per_update = versions(name, steps)
    step = np.arange(steps)
    newest = step // per_update
    update = np.where((step + 1) % per_update == 0, per_update, 0).astype(np.int32)
    tau = np.maximum(newest[:, None] - fwd, 0)  # the forward's delay, per stage
    rate = np.full((steps, STAGES), lr)
    if "lr" in fixes:
        power = 1 - np.minimum(step / warmup, 1.0)
        rate = lr * np.maximum(tau, 1) ** -power[:, None]
    lag = bwd - fwd if "predict" in fixes else np.zeros_like(fwd)
    return (fwd.astype(np.int32), bwd.astype(np.int32), update, rate.astype(np.float32),
            lag.astype(np.float32), newest[:, None] - fwd, newest[:, None] - bwd)
