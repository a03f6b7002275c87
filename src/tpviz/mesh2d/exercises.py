"""Checkers for the 2D-mesh chapter: shardings step by step, the best mesh shape, and the final
reduce-scatter."""

from __future__ import annotations

import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import cost, harness
from tpviz.core.exercises import (
    NotAttempted,
    Wrong,
    as_integer,
    as_number,
    checker,
    expect_number,
    is_stub,
)
from tpviz.mesh2d import choose
from tpviz.mesh2d.plan import plan

SIZES = {"batch": 16, "hidden": 8, "ffn": 32}  # the chapter's MLP (the final reduce-scatter)
MESH = (4, 2)
STEP_SIZES = {"batch": 24, "hidden": 16, "ffn": 48}  # Exercise 6.1: not the chapter's table
STEP_MESH = (2, 4)
BUILD_MESH = (2, 4)  # Exercise 6.6: the whole MLP, on the other 2D shape
# the arrays the learner describes -> the step of the plan that produces them
STEPS = {"in_gathered": 1, "w1_gathered": 2, "tmp": 4, "w2_gathered": 5, "out_partial": 6,
         "out": 7}
# the names of an earlier edition (X, H, Y for In, the hidden activations, Out), still accepted
OLD_NAMES = {"x_gathered": "in_gathered", "h": "tmp", "y_partial": "out_partial", "y": "out"}


def _spec(value, name: str) -> P:
    if isinstance(value, P):
        return value
    if isinstance(value, tuple | list):
        return P(*value)
    raise Wrong(f"the sharding of {name!r} should be a PartitionSpec such as P('data', None), "
                f"but it is {value!r}.")


@checker("Shardings step by step")
def check_step_shardings(answer: dict) -> str:
    """``answer[name] = (spec, per-device shape)`` for each array in ``STEPS`` (B = 24, D = 16,
    F = 48 on a data=2 × model=4 mesh); partial sums: the spec of the summed-over layout."""
    if not isinstance(answer, dict):
        raise Wrong(f"the answer should be a dict, but it is a {type(answer).__name__}.")
    answer = {OLD_NAMES.get(k, k) if OLD_NAMES.get(k) not in answer else k: v
              for k, v in answer.items()}
    p = plan(STEP_SIZES["batch"], STEP_SIZES["hidden"], STEP_SIZES["ffn"], STEP_MESH)
    missing = [k for k in STEPS if k not in answer or is_stub(answer[k])]
    if answer and all(is_stub(v) for v in answer.values()):
        raise NotAttempted
    if missing:
        raise Wrong(f"missing: {', '.join(missing)}.", f"Give all of {', '.join(STEPS)}.")
    for name, k in STEPS.items():
        want = p.steps[k].result
        try:
            spec, shape = answer[name]
        except (TypeError, ValueError):
            raise Wrong(f"answer[{name!r}] should be a pair (spec, per-device shape), got "
                        f"{answer[name]!r}.") from None
        spec = _spec(spec, name)
        padded = tuple(spec) + (None,) * (2 - len(spec))
        if padded != tuple(want.spec):
            swapped = tuple({"data": "model", "model": "data"}.get(a, a) for a in padded)
            hint = ("data and model are swapped: the batch is split over data, the widths D and "
                    "F over model." if swapped == tuple(want.spec) else
                    f"Which step makes {name}? An all-gather along an axis removes that axis "
                    "from the spec; a local matmul keeps the rows' split of its left operand and "
                    "the columns' split of its right one.")
            raise Wrong(f"the sharding of {name} is {spec}, which is not right.", hint)
        if tuple(shape) != want.local:
            raise Wrong(f"the per-device shape of {name} is {tuple(shape)}, which is not right.",
                        f"Divide each dimension of the global shape {want.shape} by the sizes of "
                        "the mesh axes that split it (data = 2, model = 4).")
    return "Every array's sharding and per-device shape match the step table."


# Cases away from ties (the best shape sends >= 8 % less than the next), chosen so that each
# plausible wrong cost model picks another shape or reports other bytes: weights at 1/2 or 1.5 x
# (cases 2, 3), no (N-1)/N factors (same shape, other bytes), rounding sqrt(B N / H2) to a shape
# without checking that it divides the sizes (case 4).
BEST_CASES = [(32768, 4096, 16384, 8), (96, 1024, 512, 8), (600, 1024, 512, 8),
              (3000, 1024, 512, 32), (1 << 19, 8192, 32768, 256), (512, 8192, 32768, 64)]


# 6.2 asks for the formula, not the library's search
CHOOSE = ("tpviz.mesh2d.best_mesh", "tpviz.mesh2d.meshes", "tpviz.mesh2d.plan",
          "tpviz.mesh2d.compare", "tpviz.mesh2d.step_time")


@checker("Best mesh shape")
def check_best_mesh(fn) -> str:
    """``fn(batch, hidden, ffn, devices) -> ((data, model), bytes)``: the mesh shape with the
    fewest bytes sent per device per training step (bf16, ring algorithms), and those bytes."""
    for batch, hidden, ffn, n in BEST_CASES:
        got = harness.guarded(fn, batch, hidden, ffn, n, what="your function", names=CHOOSE)
        where = f"for B = {batch:,}, D = {hidden:,}, F = {ffn:,} on {n} devices"
        try:
            (d, m), sent_answer = got
            d, m = as_integer(d, "the data axis size"), as_integer(m, "the model axis size")
            sent_answer = as_number(sent_answer, "the bytes")
        except (TypeError, ValueError, Wrong):
            raise Wrong(f"{where} it returned {got!r}; return ((data, model), bytes).") from None
        if d * m != n:
            raise Wrong(f"{where} it returned ({d}, {m}), which uses {d * m} devices, not {n}.")
        if (d, m) not in choose.meshes(batch, hidden, ffn, n):
            raise Wrong(f"{where} it returned ({d}, {m}), which does not divide the sizes.",
                        "A shape is allowed only if each size it splits divides evenly: B and "
                        "D over data, D and F over model.")
        fewest = plan(batch, hidden, ffn, choose.best_mesh(batch, hidden, ffn, n, dtype="bf16"),
                      "bf16").sent()
        sent = plan(batch, hidden, ffn, (d, m), "bf16").sent()
        hint = ("Count each collective of the step table, forward and backward, with the ring's "
                "(N-1)/N, for both the activations and the weights.")
        if sent > fewest * (1 + 1e-9):
            raise Wrong(f"{where} it returned ({d}, {m}), but another shape sends fewer bytes.",
                        hint)
        if not np.isclose(sent_answer, sent, rtol=1e-6):
            raise Wrong(f"{where} the shape is right, but {sent_answer:,.0f} bytes is not what "
                        "each device sends.", hint)
    return (f"Right for all {len(BEST_CASES)} cases: big batches favour the data axis, big "
            "weights the model axis.")


# --- numbers and a design problem ----------------------------------------------------------------

HELD = {"batch": 16384, "hidden": 4096, "ffn": 16384, "mesh": (4, 2)}
DESIGN = {"batch": 262144, "hidden": 8192, "ffn": 32768, "devices": 64, "budget": 150 * 2**20,
          "ms": 10.0}
CLUSTER = "H100 cluster (NVLink + InfiniBand)"


@checker("Weights held on a 2D mesh")
def check_weights_held(answer) -> str:
    """D = 4,096, F = 16,384 in bf16 on the data=4 × model=2 mesh: MiB of weights one device
    holds while the layer runs (its stored shards plus the gathered W₁' and W₂')."""
    answer = as_number(answer)
    q = plan(HELD["batch"], HELD["hidden"], HELD["ffn"], HELD["mesh"], "bf16")
    want = q.memory.weights_held / 2**20
    whole = 2 * HELD["hidden"] * HELD["ffn"] * 2 / 2**20
    if np.isclose(answer, q.memory.weights / 2**20, rtol=1e-3):
        raise Wrong("that is only the stored shards (1/8 of each weight).",
                    "While the layer runs, the gathered weights are held too.")
    if np.isclose(answer, whole, rtol=1e-3):
        raise Wrong("that is both weights whole, as data parallelism holds them.",
                    "After the all-gather along data, which part of each weight does a device "
                    "hold?")
    expect_number(answer, want, rel=1e-3, hint="Stored: 1/(N_X·N_Y) of both weights; gathered: "
                  "1/N_Y of both. Two bytes per element.")
    return f"{want:.0f} MiB: the gathered 1/N_Y of each weight dominates."


@checker("The compute-bound batch")
def check_compute_bound_batch(answer) -> str:
    """TPU v5e, F = 16,384: the fewest tokens per chip for which the 2D step is compute-bound."""
    answer = as_number(answer)
    tpu = cost.SYSTEMS["TPU v5e (ICI)"]
    want = choose.smallest_batch_per_device(16384, tpu)
    ratio = tpu.flops / tpu.bandwidth
    if np.isclose(answer, ratio, rtol=1e-3):
        raise Wrong("that is R/W itself, the bound of a single sharded axis.",
                    "The 2D bound grows with the square of R/W.")
    if np.isclose(answer, 4 * ratio**2 / 16384, rtol=1e-3):
        raise Wrong("that bound adds the two axes' times; they run on different links.",
                    "Look at the bound in the chapter again: the slower axis counts.")
    expect_number(answer, want, rel=1e-2, hint="Compute R/W from the system's preset, then "
                  "use the Scaling Book's bound for one data and one model axis.")
    return f"{want:,.0f} tokens per chip (R/W = {ratio:,.0f})."


@checker("Design: a mesh for 64 GPUs")
def check_mesh_design(shape, comm_ms) -> str:
    """B = 262,144 tokens, D = 8,192, F = 32,768 in bf16 on 64 GPUs of the H100 cluster preset;
    at most 150 MiB of weights held per device and 10 ms of communication per training step.
    ``shape`` = (N_X, N_Y), any mesh within both budgets (two are); ``comm_ms`` its
    communication time per training step in ms."""
    try:
        shape = tuple(as_integer(n, "a mesh axis size") for n in shape)
    except TypeError:
        raise Wrong("shape should be a pair (N_X, N_Y).") from None
    if len(shape) != 2 or shape[0] * shape[1] != DESIGN["devices"]:
        raise Wrong(f"{shape} is not a (N_X, N_Y) mesh of 64 devices.")
    b, h, f, n = (DESIGN[k] for k in ("batch", "hidden", "ffn", "devices"))
    if shape not in choose.meshes(b, h, f, n):
        raise Wrong(f"{shape} does not divide the sizes.")
    gpu = cost.SYSTEMS[CLUSTER]
    q = plan(b, h, f, shape, "bf16")
    held, ms = q.memory.weights_held, choose.step_time(q, gpu).comm_s * 1e3
    if held > DESIGN["budget"]:
        raise Wrong(f"{shape} holds {held / 2**20:,.0f} MiB of weights: over the budget.",
                    "The gathered weights are 1/N_Y of both matrices: which N_Y fit?")
    if ms > DESIGN["ms"]:
        raise Wrong(f"{shape} fits, but communicates for {ms:.1f} ms per step: over 10 ms.",
                    "Which groups leave an NVLink node, and how much do they send?")
    expect_number(as_number(comm_ms), ms, what="the communication time (ms)", rel=1e-2,
                  hint="mesh2d.step_time(mesh2d.plan(...), system).comm_s, in ms.")
    return (f"{shape}: {held / 2**20:,.0f} MiB of weights, {ms:.1f} ms. A larger data axis "
            "gathers less of each weight (less memory) but its model groups span more nodes.")
