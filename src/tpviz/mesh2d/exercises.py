"""Checkers for the 2D-mesh chapter: shardings step by step, the best mesh shape, and the final
reduce-scatter."""

from __future__ import annotations

import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import compiled, cost
from tpviz.core.exercises import (
    NotAttempted,
    Wrong,
    as_integer,
    as_number,
    call,
    checker,
    expect_array,
    expect_number,
    is_stub,
)
from tpviz.devices import make_mesh
from tpviz.mesh2d import choose, run
from tpviz.mesh2d.check import found
from tpviz.mesh2d.plan import DATA, MODEL, plan

SIZES = {"batch": 16, "h1": 8, "h2": 32}
MESH = (4, 2)
# the arrays the learner describes -> the step of the plan that produces them
STEPS = {"x_gathered": 1, "w1_gathered": 2, "h": 3, "w2_gathered": 5, "y_partial": 6, "y": 7}


def _spec(value, name: str) -> P:
    if isinstance(value, P):
        return value
    if isinstance(value, tuple | list):
        return P(*value)
    raise Wrong(f"the sharding of {name!r} should be a PartitionSpec such as P('data', None), "
                f"but it is {value!r}.")


@checker("Shardings step by step")
def check_step_shardings(answer: dict) -> str:
    """``answer[name] = (spec, per-device shape)`` for each array in ``STEPS`` (B = 16, H₁ = 8,
    H₂ = 32 on a data=4 × model=2 mesh); partial sums: the spec of the summed-over layout."""
    if not isinstance(answer, dict):
        raise Wrong(f"the answer should be a dict, but it is a {type(answer).__name__}.")
    p = plan(SIZES["batch"], SIZES["h1"], SIZES["h2"], MESH)
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
            hint = ("data and model are swapped: the batch is split over data, the hidden sizes "
                    "over model." if swapped == tuple(want.spec) else
                    f"Which step makes {name}? An all-gather along an axis removes that axis "
                    "from the spec; a local matmul keeps the rows' split of its left operand and "
                    "the columns' split of its right one.")
            raise Wrong(f"the sharding of {name} is {spec}, which is not right.", hint)
        if tuple(shape) != want.local:
            raise Wrong(f"the per-device shape of {name} is {tuple(shape)}, which is not right.",
                        f"Divide each dimension of the global shape {want.shape} by the sizes of "
                        "the mesh axes that split it (data = 4, model = 2).")
    return "Every array's sharding and per-device shape match the step table."


@checker("Best mesh shape")
def check_best_mesh(fn) -> str:
    """``fn(batch, h1, h2, devices) -> (data, model)``: the mesh shape with the fewest bytes
    sent per device per training step."""
    cases = [(16384, 4096, 16384, 8), (64, 4096, 16384, 8), (1 << 20, 8192, 32768, 256),
             (8192, 1024, 4096, 64), (512, 8192, 32768, 64)]
    for batch, h1, h2, n in cases:
        got = call(fn, batch, h1, h2, n, what="your function")
        where = f"for B = {batch:,}, H₁ = {h1:,}, H₂ = {h2:,} on {n} devices"
        try:
            d, m = got
            d, m = as_integer(d, "the data axis size"), as_integer(m, "the model axis size")
        except (TypeError, ValueError):
            raise Wrong(f"{where} it returned {got!r}; return a pair (data, model).") from None
        if d * m != n:
            raise Wrong(f"{where} it returned ({d}, {m}), which uses {d * m} devices, not {n}.")
        if (d, m) not in choose.meshes(batch, h1, h2, n):
            raise Wrong(f"{where} it returned ({d}, {m}), which does not divide the sizes.")
        fewest = plan(batch, h1, h2, choose.best_mesh(batch, h1, h2, n, dtype="bf16"),
                             "bf16").sent()
        sent = plan(batch, h1, h2, (d, m), "bf16").sent()
        if sent > fewest * (1 + 1e-9):
            raise Wrong(f"{where} it returned ({d}, {m}), whose devices each send "
                        f"{sent / 2**20:,.1f} MiB per step; another shape sends only "
                        f"{fewest / 2**20:,.1f} MiB.",
                        "Try every (d, n // d) that divides the sizes and keep the one with the "
                        "fewest bytes: activations cost ∝ B·H₁/d, weights ∝ H₁·H₂/m.")
    return "Right for all five cases: big batches favour the data axis, big weights the model axis."


@checker("The final reduce-scatter")
def check_final_reduce_scatter(fn) -> str:
    """``fn(partial)`` per device: ``Y'[B/d, H₁]`` (partial sums over "model") → this device's
    ``Y[B/d, H₁/m]``, used as the last step of the 2D MLP on a data=4 × model=2 mesh."""
    rng = np.random.default_rng(3)
    b, h1, h2 = SIZES["batch"], SIZES["h1"], SIZES["h2"]
    x = rng.standard_normal((b, h1), dtype=np.float32)
    w1 = (rng.standard_normal((h1, h2)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((h2, h1)) / 6).astype(np.float32)
    mesh = make_mesh(MESH, (DATA, MODEL))
    if not callable(fn):
        raise Wrong(f"your answer should be a function, but it is a {type(fn).__name__}.")
    program = run.forward(mesh, final=fn)
    args = run.place(mesh, x, w1, w2)
    y = call(program, *args, what="the 2D MLP with your last step")
    hint = ("jax.lax.psum_scatter(partial, 'model', scatter_dimension=1, tiled=True): add over "
            "the model axis and keep this device's slice of the columns.")
    expect_array(y, np.asarray(run.reference(x, w1, w2)), what="the MLP's output", rtol=1e-4,
                 hint=hint)
    held = found(compiled.collectives(program, *args), mesh)
    p = plan(b, h1, h2, MESH)
    last = [c for c in held if c[1] == MODEL and c[0] != "all-gather"]
    if last != [("reduce-scatter", MODEL, p.steps[-1].bytes)]:
        raise Wrong(f"the values are right, but the last step compiles to {last}: more bytes "
                    "than a reduce-scatter moves.", hint)
    return (f"Y is sharded like X, and the compiled program ends with one reduce-scatter of "
            f"{p.steps[-1].bytes} bytes per device over model.")


# --- numbers and a design problem ----------------------------------------------------------------

HELD = {"batch": 16384, "h1": 4096, "h2": 16384, "mesh": (4, 2)}
DESIGN = {"batch": 262144, "h1": 8192, "h2": 32768, "devices": 64, "budget": 100 * 2**20}
CLUSTER = "H100 cluster (NVLink + InfiniBand)"


@checker("Weights held on a 2D mesh")
def check_weights_held(answer) -> str:
    """H = 4,096, F = 16,384 in bf16 on the data=4 × model=2 mesh: MiB of weights one device
    holds while the layer runs (its stored shards plus the gathered W₁' and W₂')."""
    answer = as_number(answer)
    q = plan(HELD["batch"], HELD["h1"], HELD["h2"], HELD["mesh"], "bf16")
    want = q.memory.weights_held / 2**20
    whole = 2 * HELD["h1"] * HELD["h2"] * 2 / 2**20
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
    """B = 262,144 tokens, H = 8,192, F = 32,768 in bf16 on 64 GPUs of the H100 cluster preset;
    at most 100 MiB of weights held per device. ``shape`` = (N_X, N_Y), the fastest allowed;
    ``comm_ms`` its communication time per training step in ms."""
    try:
        shape = tuple(as_integer(n, "a mesh axis size") for n in shape)
    except TypeError:
        raise Wrong("shape should be a pair (N_X, N_Y).") from None
    if len(shape) != 2 or shape[0] * shape[1] != DESIGN["devices"]:
        raise Wrong(f"{shape} is not a (N_X, N_Y) mesh of 64 devices.")
    b, h, f, n = (DESIGN[k] for k in ("batch", "h1", "h2", "devices"))
    gpu = cost.SYSTEMS[CLUSTER]
    allowed = [s for s in choose.meshes(b, h, f, n)
               if plan(b, h, f, s, "bf16").memory.weights_held <= DESIGN["budget"]]
    want = min(allowed, key=lambda s: choose.step_time(plan(b, h, f, s, "bf16"), gpu).comm_s)
    if shape not in allowed:
        held = plan(b, h, f, shape, "bf16").memory.weights_held / 2**20
        raise Wrong(f"{shape} holds {held:,.0f} MiB of weights: over the budget.",
                    "The gathered weights are 1/N_Y of both matrices: find the smallest N_Y "
                    "that fits first.")
    if shape != want:
        raise Wrong(f"{shape} fits, but another allowed mesh communicates for less time.",
                    "Compare the allowed shapes' times; which groups leave an NVLink node?")
    want_ms = choose.step_time(plan(b, h, f, want, "bf16"), gpu).comm_s * 1e3
    expect_number(as_number(comm_ms), want_ms, what="the communication time (ms)", rel=1e-2,
                  hint="mesh2d.step_time(mesh2d.plan(...), system).comm_s, in ms.")
    return (f"{want}: {want_ms:.1f} ms; the model axis spans two nodes, the price of the memory "
            "budget.")
