"""Checkers for chapter 8 (asynchronous pipelines and the schedule zoo)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.core.exercises import Wrong, as_integer, as_number, call, checker, mesh_1d
from tpviz.errors import TpvizError
from tpviz.pipeline.plan import Op, Schedule
from tpviz.pipeline.simulate import simulate


def _ints(answer, n: int, what: str) -> list[int]:
    if isinstance(answer, str) or not hasattr(answer, "__len__") or len(answer) != n:
        raise Wrong(f"give a list of {n} numbers, one per {what}.")
    return [as_integer(v, f"each {what}'s number") for v in np.asarray(answer).ravel().tolist()]


@checker("Staleness under PipeDream")
def check_staleness(answer) -> str:
    """PipeDream, p = 6: by how many updates is each stage's gradient stale, at most?"""
    got, want = _ints(answer, 6, "stage"), [5, 4, 3, 2, 1, 0]
    if got == [6, 5, 4, 3, 2, 1]:
        raise Wrong("that is the number of versions each stage stashes (p - s), not how far "
                    "behind they are.", "The last stage runs F and B back to back: 0 behind.")
    if got == want[::-1]:
        raise Wrong("reversed: the first stage waits longest for its backward.")
    if got != want:
        raise Wrong(f"{got} is not right.", "Count the updates a stage makes between the "
                    "forward and the backward of one microbatch.")
    return "Stage s is p - 1 - s updates behind; its gradient lands on newer weights."


@checker("Weight memory: PipeDream against 2BW")
def check_weight_memory(pipedream, two_bw) -> str:
    """p = 8 stages: weight copies summed over all stages (units: one stage's weights)."""
    a, b = as_number(pipedream, "PipeDream's total"), as_number(two_bw, "2BW's total")
    if math.isclose(a, 8 * 8):
        raise Wrong("PipeDream: 64 counts p versions on every stage; stage s keeps p - s.")
    if not math.isclose(a, 36):
        raise Wrong(f"PipeDream's total {a:g} is not right.", "Sum p - s over s = 0 … p-1.")
    if math.isclose(b, 8):
        raise Wrong("2BW's total: 8 is one version per stage; 2BW double-buffers.")
    if not math.isclose(b, 16):
        raise Wrong(f"2BW's total {b:g} is not right.", "How many versions does each stage "
                    "keep under 2BW?")
    return "36 against 16: 2BW's memory does not grow with the depth."


CHIMERA_P = 4


def _chimera_ops(got, p: int) -> tuple[tuple[Op, ...], ...]:
    try:
        ops = tuple(tuple(Op(str(k), as_integer(i, "a microbatch"), as_integer(c, "a chunk"))
                          for k, i, c in device) for device in got)
    except (TypeError, ValueError):
        raise Wrong("return one list per device of (kind, microbatch, stage) triples such as "
                    f"('F', 0, 0); got {str(got)[:80]}.") from None
    if len(ops) != p:
        raise Wrong(f"return {p} lists, one per device; got {len(ops)}.")
    return ops


@checker("Build: Chimera's schedule for p = 4")
def check_chimera(fn) -> str:
    """``fn(p)`` → per device, (kind, microbatch, stage) triples of Chimera's unit of m = p
    microbatches: 0 … p/2-1 go down (stage s on device s), p/2 … p-1 up (stage s on device
    p-1-s)."""
    p = CHIMERA_P
    ops = _chimera_ops(call(fn, p, what=f"chimera({p})"), p)
    half = p // 2
    for d in range(p):
        want = ({("F", i, d) for i in range(half)} | {("B", i, d) for i in range(half)} |
                {("F", i, p - 1 - d) for i in range(half, p)} |
                {("B", i, p - 1 - d) for i in range(half, p)})
        got = set(ops[d])
        if got != want or len(ops[d]) != len(want):
            if all(c == d for _, _, c in ops[d]):
                raise Wrong(f"device {d} runs only stage {d}: that is one pipeline, not two.",
                            f"Microbatches {half} … {p - 1} go up: stage s on device p-1-s.")
            raise Wrong(f"device {d} should run F and B of microbatches 0 … {half - 1} at "
                        f"stage {d} and of {half} … {p - 1} at stage {p - 1 - d}, each once.")
    sched = Schedule("chimera", p, p, 1, ops, "bidirectional")
    try:
        t = simulate(sched, 1.0, 1.0)
    except TpvizError:
        raise Wrong("your order deadlocks: some device waits for an op that waits for it.",
                    "On each device, an op may only wait for ops earlier in other devices' "
                    "lists.") from None
    want_bubble = (p - 2) / (2 * p + p - 2)
    if t.bubble_fraction > want_bubble + 1e-9:
        raise Wrong(f"valid, but the bubble is {t.bubble_fraction:.1%}; Chimera reaches "
                    f"{want_bubble:.1%} (t_F = t_B).", "Run a ready backward before a forward, "
                    "and the forward furthest along the model first.")
    return f"bubble {t.bubble_fraction:.1%} = (p-2)/(2m+p-2), peak activations " \
           f"{list(t.peak_activations)}."


def _two_bw_reference(w0, grad, lr, steps):
    out, prev, cur = [w0], w0, w0
    for _ in range(steps):
        prev, cur = cur, cur - lr * grad(prev)
        out.append(cur)
    return out


@checker("Build: PipeDream-2BW's update on real arrays")
def check_two_bw(fn) -> str:
    """``fn(w0, grad, lr, steps)`` → [W(0), W(1), …, W(steps)] with
    w(t+1) = w(t) - lr grad(w(t-1)) and w(-1) = w(0); w0 sharded over 4 devices."""
    mesh = mesh_1d(4, "stage")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 8), dtype=np.float32)
    target = jax.device_put(a @ a.T / 8 + np.eye(8, dtype=np.float32),
                            NamedSharding(mesh, P("stage")))
    w0 = jax.device_put(rng.standard_normal((8, 8), dtype=np.float32),
                        NamedSharding(mesh, P("stage")))

    def grad(w):  # the gradient of 0.5 |w target - 1|^2, a quadratic
        return (w @ target - 1.0) @ target.T

    lr, steps = 0.05, 5
    got = call(fn, w0, grad, lr, steps, what="two_bw(w0, grad, lr, steps)")
    if not hasattr(got, "__len__") or len(got) != steps + 1:
        raise Wrong(f"return the list [W(0), …, W({steps})] of {steps + 1} arrays.")
    want = _two_bw_reference(w0, grad, lr, steps)
    sgd = [w0]
    for _ in range(steps):
        sgd.append(sgd[-1] - lr * grad(sgd[-1]))
    for t, (g, w, s) in enumerate(zip(got, want, sgd, strict=True)):
        g = jnp.asarray(g)
        if g.shape != w.shape:
            raise Wrong(f"W({t}) has shape {g.shape}, expected {w.shape}.")
        if not bool(jnp.all(jnp.isfinite(g))):
            raise Wrong(f"W({t}) holds NaN or inf.")
        if np.allclose(g, w, rtol=1e-5, atol=1e-6):
            continue
        if np.allclose(g, s, rtol=1e-5, atol=1e-6):
            raise Wrong(f"W({t}) is plain SGD: the gradient at W(t), not at W(t-1).",
                        "2BW's gradient comes from the version before the current one.")
        raise Wrong(f"W({t}) differs from W(t-1) - lr grad(W(t-2)) (largest error "
                    f"{float(jnp.max(jnp.abs(g - w))):.2e}).",
                    "Keep two versions: the current one, updated, and the one before, "
                    "differentiated; start with both equal to W(0).")
    return "two versions, one update behind: w(t+1) = w(t) - η ∇f(w(t-1)), exactly."


MEMORY_CAP = {"stages": 8, "microbatches": 16, "weights": 1.0, "activations": 8}
CANDIDATES = ("1f1b", "zb-h1", "chimera", "zb-h2", "zb-v", "dualpipe", "dualpipev",
              "pipedream", "2bw")


def _fits(name: str):
    from tpviz.pipeline import schedule

    t = simulate(schedule(name, MEMORY_CAP["stages"], MEMORY_CAP["microbatches"]), 1.0, 1.0,
                 1.0)
    v = t.schedule.chunks
    fits = (max(t.weight_copies) <= MEMORY_CAP["weights"] and
            max(t.peak_activations) / v <= MEMORY_CAP["activations"] and max(t.staleness) == 0)
    return t, fits


@checker("Design: a schedule under a memory cap")
def check_memory_cap(name) -> str:
    """p = 8, m = 16, t_F = t_B = t_W: synchronous semantics, at most one stage's weights and
    8 microbatches of full-stage activations per device: the schedule with the least bubble."""
    if not isinstance(name, str) or name not in CANDIDATES:
        raise Wrong(f"answer with one of the names {', '.join(CANDIDATES)}.")
    best = min((n for n in CANDIDATES if _fits(n)[1]), key=lambda n: _fits(n)[0].bubble_fraction)
    t, _ = _fits(name)
    if max(t.staleness):
        raise Wrong(f"{name} is asynchronous: its gradients are stale, so it changes the "
                    "training semantics.")
    if max(t.weight_copies) > MEMORY_CAP["weights"]:
        raise Wrong(f"{name} keeps {max(t.weight_copies):g} stages' weights per device; the "
                    "cap is 1.")
    if max(t.peak_activations) / t.schedule.chunks > MEMORY_CAP["activations"]:
        raise Wrong(f"{name} holds up to {max(t.peak_activations) / t.schedule.chunks:g} "
                    "microbatches of activations on a device; the cap is 8.")
    if name != best:
        raise Wrong(f"{name} fits, with a bubble of {t.bubble_fraction:.1%}; another schedule "
                    "that fits idles less.")
    return f"{name}: bubble {t.bubble_fraction:.1%} within the cap."


@checker("DualPipe's bubble against 1F1B's")
def check_dualpipe_idle(dualpipe, one_f_one_b) -> str:
    """PP = 8, F = 1, B (full backward) = 2, W = 1, F&B = F + B: idle time per device by
    DeepSeek's table, for DualPipe and for 1F1B."""
    a, b = as_number(dualpipe, "DualPipe's idle"), as_number(one_f_one_b, "1F1B's idle")
    if math.isclose(b, 7 * 2):
        raise Wrong("1F1B: (PP-1)(F+B) with B the full backward, 2.")
    if not math.isclose(b, 21):
        raise Wrong(f"1F1B's idle {b:g} is not right.", "(PP - 1)(F + B).")
    if math.isclose(a, 3 * (3 + 2)):
        raise Wrong("DualPipe: you left out the - 3W (the weight gradients fill bubbles).")
    if not math.isclose(a, 6):
        raise Wrong(f"DualPipe's idle {a:g} is not right.", "(PP/2 - 1)(F&B + B - 3W).")
    return "6 against 21: DualPipe idles 3.5x less, at twice the parameters."
