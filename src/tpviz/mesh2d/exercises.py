"""Checkers for the 2D-mesh chapter: shardings step by step, the best mesh shape, and the final
reduce-scatter."""

from __future__ import annotations

import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import build, compiled, cost
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
from tpviz.mesh2d.check import found, predicted
from tpviz.mesh2d.plan import DATA, MODEL, plan

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


@checker("Best mesh shape")
def check_best_mesh(fn) -> str:
    """``fn(batch, hidden, ffn, devices) -> ((data, model), bytes)``: the mesh shape with the
    fewest bytes sent per device per training step (bf16, ring algorithms), and those bytes."""
    for batch, hidden, ffn, n in BEST_CASES:
        got = call(fn, batch, hidden, ffn, n, what="your function")
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


@checker("The final reduce-scatter")
def check_final_reduce_scatter(fn) -> str:
    """``fn(partial)`` per device: ``Out'[B/N_X, D]`` (partial sums over "model") → this
    device's ``Out[B/N_X, D/N_Y]``, used as the last step of the 2D MLP on a data=4 × model=2
    mesh."""
    rng = np.random.default_rng(3)
    b, d, f = SIZES["batch"], SIZES["hidden"], SIZES["ffn"]
    x = rng.standard_normal((b, d), dtype=np.float32)
    w1 = (rng.standard_normal((d, f)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((f, d)) / 6).astype(np.float32)
    mesh = make_mesh(MESH, (DATA, MODEL))
    if not callable(fn):
        raise Wrong(f"your answer should be a function, but it is a {type(fn).__name__}.")
    program = run.forward(mesh, final=fn)
    args = run.place(mesh, x, w1, w2)
    y = call(program, *args, what="the 2D MLP with your last step")
    hint = ("One collective both adds the partial sums over the model axis and leaves each "
            "device its slice of the columns, as In was split.")
    expect_array(y, np.asarray(run.reference(x, w1, w2)), what="the MLP's output", rtol=1e-4,
                 hint=hint)
    held = found(compiled.collectives(program, *args), mesh)
    p = plan(b, d, f, MESH)
    last = [c for c in held if c[1] == MODEL and c[0] != "all-gather"]
    if last != [("reduce-scatter", MODEL, p.steps[-1].bytes)]:
        raise Wrong(f"the values are right, but the last step compiles to {last}: more bytes "
                    "than a reduce-scatter moves.", hint)
    return (f"Out is sharded like In, and the compiled program ends with one reduce-scatter of "
            f"{p.steps[-1].bytes} bytes per device over model.")


@checker("The 2D MLP, by hand")
def check_mlp2d(fn) -> str:
    """``fn(x, w1, w2)`` per device on a data=2 × model=4 mesh, with In[B_data, D_model],
    W₁[D_data, F_model], W₂[F_model, D_data]: returns Out sharded like In. The compiled
    program must hold exactly the plan's collectives (kind, axis, bytes)."""
    rng = np.random.default_rng(4)
    b, d, f = SIZES["batch"], SIZES["hidden"], SIZES["ffn"]
    x = rng.standard_normal((b, d), dtype=np.float32)
    w1 = (rng.standard_normal((d, f)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((f, d)) / 6).astype(np.float32)
    mesh = make_mesh(BUILD_MESH, (DATA, MODEL))
    ran = build.run(fn, mesh, run.IN_SPECS, run.OUT_SPEC, x, w1, w2,
                    what="your 2D MLP")
    hint = ("Follow the seven steps: which arrays must be completed along which axis before "
            "each matmul, and what makes the partial sums whole again?")
    expect_array(ran.out, np.asarray(run.reference(x, w1, w2)), what="the MLP's output",
                 rtol=1e-4, atol=1e-4, hint=hint)
    got = found(compiled.collectives(ran.program), mesh)
    want = predicted(plan(b, d, f, BUILD_MESH))
    seen = build.summary(build.moving(ran.program, mesh))
    if any(axis not in (DATA, MODEL) for _, axis, _ in got):
        raise Wrong(f"right values, but the compiled program holds {seen}: a collective over "
                    "the whole mesh gathers more than a device needs.", hint)
    if any(k == "all-reduce" for k, _, _ in got):
        raise Wrong(f"right values, but the compiled program holds {seen}: an all-reduce sends "
                    "twice the bytes of a reduce-scatter and leaves every device the whole sum.",
                    hint)
    if sorted(k for k, a, _ in got if a == DATA) != sorted(k for k, a, _ in want if a == DATA):
        raise Wrong(f"right values, but along 'data' the compiled program holds {seen}; the "
                    "weights are what moves along data, once each.", hint)
    if got != want:
        more = sum(n for *_, n in got) > sum(n for *_, n in want)
        raise Wrong(f"right values, but the compiled program holds {seen}"
                    + (": more bytes than the step table." if more else
                       ", which is not the step table's set of collectives."), hint)
    return (f"Out exact, and the compiled program holds the step table's {len(want)} collectives "
            "with their axes and bytes.")


# --- numbers and a design problem ----------------------------------------------------------------

HELD = {"batch": 16384, "hidden": 4096, "ffn": 16384, "mesh": (4, 2)}
DESIGN = {"batch": 262144, "hidden": 8192, "ffn": 32768, "devices": 64, "budget": 100 * 2**20}
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
    at most 100 MiB of weights held per device. ``shape`` = (N_X, N_Y), the fastest allowed;
    ``comm_ms`` its communication time per training step in ms."""
    try:
        shape = tuple(as_integer(n, "a mesh axis size") for n in shape)
    except TypeError:
        raise Wrong("shape should be a pair (N_X, N_Y).") from None
    if len(shape) != 2 or shape[0] * shape[1] != DESIGN["devices"]:
        raise Wrong(f"{shape} is not a (N_X, N_Y) mesh of 64 devices.")
    b, h, f, n = (DESIGN[k] for k in ("batch", "hidden", "ffn", "devices"))
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
