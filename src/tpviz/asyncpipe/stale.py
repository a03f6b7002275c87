"""Training with each schedule's true staleness: a 4-stage MLP on a 4-device mesh.

Every microbatch is one step of the stream. Stage s (device s) runs its forward with the weight
version the schedule's timeline says that forward read, and its backward with the version its
backward read (:attr:`tpviz.pipeline.Timeline.versions`): the same one under weight stashing
(PipeDream, 2BW), the newest one without (PipeMare, AMPNet). Synchronous training reads the
newest version everywhere. The run reproduces which weights every op reads, not the timing: the
microbatch's ops run one stage after another in one ``jax.jit(jax.shard_map(...))`` program,
activations and gradients moving between the devices by ``ppermute``.

PipeMare's two fixes (Yang et al. 2021): *learning-rate rescheduling* divides stage s's step
by its delay tau_s at first and anneals to the base rate over ``warmup`` steps
(lr tau_s^-(1 - min(i / warmup, 1))); *discrepancy correction* (weight prediction) runs the
backward with w - tau_s delta, delta an exponential average of the stage's weight updates, an
estimate of the weights its forward read.

The optimizer is SGD with momentum. The task: regress the output of a random "teacher" MLP of
the same shape (so the loss can go to 0). The loss of the current weights on a fixed batch is
recorded after every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import compiled, validate, verify
from tpviz.devices import chosen_devices, make_mesh
from tpviz.errors import ArgumentError, ArgumentTypeError, DeviceSetupError
from tpviz.pipeline import schedule, simulate
from tpviz.pipeline.run import init

AXIS = "stage"
STAGES = 4
#: the runs of the chapter: label -> (schedule whose versions are read, PipeMare fixes)
RUNS = {"synchronous": ("sync", ()), "synchronous, 4 per update": ("flush", ()),
        "PipeDream": ("pipedream", ()), "2BW": ("2bw", ()),
        "AMPNet = PipeMare, no fixes": ("ampnet", ()),
        "PipeMare + LR rescheduling": ("pipemare", ("lr",)),
        "PipeMare + both fixes": ("pipemare", ("lr", "predict"))}


@dataclass(frozen=True)
class Curve:
    label: str
    losses: np.ndarray  # loss of the current weights on the fixed batch, after every step
    forward_lag: np.ndarray  # [steps, stages]: updates between the newest and the forward's
    backward_lag: np.ndarray  # [steps, stages]: the same for the backward

    @property
    def final(self) -> float:
        """Mean loss of the last tenth of the steps."""
        tail = max(1, len(self.losses) // 10)
        return float(np.mean(self.losses[-tail:]))


class Runs(dict):
    """``{lr: {label: Curve}}``, and ``program``: the compiled program that trained them all
    (for :func:`tpviz.core.compiled.collectives` and ``memory``)."""

    program: object = None


def versions(name: str, steps: int, stages: int = STAGES) -> tuple[np.ndarray, np.ndarray, int]:
    """(forward version, backward version) of every (step, stage), and microbatches per update,
    read off the simulated timeline of schedule ``name`` ("sync": the newest version, one
    update per microbatch; "flush": the newest, one update per p microbatches)."""
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


def _program(mesh, stages: int, slots: int, beta: float, gamma: float):
    """The jitted scan over the stream, all runs at once (a leading axis r of runs): each
    device holds its stage's weights, a ring of ``slots`` versions, momentum, the gradient
    being accumulated and PipeMare's average update delta."""

    def mm(a, b):  # [r, n, k] @ [r, k, j]
        return jnp.einsum("rnk,rkj->rnj", a, b)

    def per_device(w0, b0, xs, ts, fwd, bwd, update, lr, lag, x_eval, t_eval):
        d = jax.lax.axis_index(AXIS)
        first, last = d == 0, d == stages - 1
        right = [(i, i + 1) for i in range(stages - 1)]
        left = [(i + 1, i) for i in range(stages - 1)]
        runs = fwd.shape[0]

        def forward(w, b, x):  # w: [r, H, H]  b: [r, H]  x: [n, H] -> saved (h, y): [r, n, H]
            h = jnp.broadcast_to(x, (runs, *x.shape))
            saved_h = saved_y = h
            for s in range(stages):
                y = jnp.tanh(mm(h, w) + b[:, None, :])
                saved_h, saved_y = jnp.where(d == s, h, saved_h), jnp.where(d == s, y, saved_y)
                if s < stages - 1:
                    h = jnp.where(first, h, jax.lax.ppermute(y, AXIS, right))
            return saved_h, saved_y

        def pick(hist, v):  # hist: [r, K, ...], v: [r] -> [r, ...]
            return jnp.take_along_axis(hist, (v % slots).reshape(-1, *[1] * (hist.ndim - 1)),
                                       axis=1)[:, 0]

        def step(state, inputs):
            hist_w, hist_b, mom_w, mom_b, acc_w, acc_b, dlt_w, dlt_b, u = state
            x, t, fv, bv, upd, rate, tau = inputs  # fv, bv, rate, tau: [r, 1]; upd: [r]
            h, y = forward(pick(hist_w, fv[:, 0]), pick(hist_b, fv[:, 0]), x)
            wb = pick(hist_w, bv[:, 0]) - tau[:, :, None] * dlt_w  # tau = 0 unless predicted
            dy = jnp.where(last, (y - t) / t.shape[0], 0.0)
            gw, gb = jnp.zeros_like(mom_w), jnp.zeros_like(mom_b)
            for s in reversed(range(stages)):
                dz = dy * (1 - y * y)
                gw = jnp.where(d == s, jnp.einsum("rnk,rnj->rkj", h, dz), gw)
                gb = jnp.where(d == s, dz.sum(axis=1), gb)
                if s > 0:
                    dh = jnp.einsum("rnj,rkj->rnk", dz, wb)
                    dy = jnp.where(d == s - 1, jax.lax.ppermute(dh, AXIS, left), dy)
            acc_w, acc_b = acc_w + gw, acc_b + gb
            n = upd[:, None, None]  # microbatches in this update (0: no update this step)
            on = n > 0
            cur_w, cur_b = pick(hist_w, u), pick(hist_b, u)
            mom_w2 = beta * mom_w + acc_w / jnp.maximum(n, 1)
            mom_b2 = beta * mom_b + acc_b / jnp.maximum(n[:, 0], 1)
            new_w = cur_w - rate[:, :, None] * mom_w2
            new_b = cur_b - rate * mom_b2
            dlt_w = jnp.where(on, gamma * dlt_w + (1 - gamma) * (new_w - cur_w), dlt_w)
            dlt_b = jnp.where(on[:, 0], gamma * dlt_b + (1 - gamma) * (new_b - cur_b), dlt_b)
            slot = jax.nn.one_hot((u + 1) % slots, slots, dtype=bool)  # [r, K]
            write = slot & (upd > 0)[:, None]
            hist_w = jnp.where(write[:, :, None, None], new_w[:, None], hist_w)
            hist_b = jnp.where(write[:, :, None], new_b[:, None], hist_b)
            u = u + (upd > 0).astype(u.dtype)
            state = (hist_w, hist_b, jnp.where(on, mom_w2, mom_w),
                     jnp.where(on[:, 0], mom_b2, mom_b), jnp.where(on, 0.0, acc_w),
                     jnp.where(on[:, 0], 0.0, acc_b), dlt_w, dlt_b, u)
            _, y_eval = forward(pick(hist_w, u), pick(hist_b, u), x_eval)
            loss = jnp.where(last, jnp.sum((y_eval - t_eval) ** 2, axis=(1, 2))
                             / (2 * t_eval.shape[0]), 0.0)
            return state, jax.lax.psum(loss, AXIS)

        w0, b0 = w0[0], b0[0]
        zw = jnp.zeros((runs, *w0.shape), w0.dtype)
        zb = jnp.zeros((runs, *b0.shape), b0.dtype)
        hist_w = jnp.zeros((runs, slots, *w0.shape), w0.dtype).at[:, 0].set(w0)
        hist_b = jnp.zeros((runs, slots, *b0.shape), b0.dtype).at[:, 0].set(b0)
        state = (hist_w, hist_b, zw, zb, zw, zb, zw, zb, jnp.zeros((runs,), jnp.int32))
        swap = (fwd, bwd, update, lr, lag)  # [r, T, ...] -> [T, r, ...] to scan over T
        _, losses = jax.lax.scan(step, state, (xs, ts, *(jnp.swapaxes(a, 0, 1) for a in swap)))
        return losses.T[None]  # [1, r, T]

    stage, rep, per_stage = P(AXIS), P(), P(None, None, AXIS)
    return jax.jit(jax.shard_map(
        per_device, mesh=mesh,
        in_specs=(stage, stage, rep, rep, per_stage, per_stage, rep, per_stage, per_stage,
                  rep, rep),
        out_specs=P(AXIS), check_vma=False))


def train(labels=tuple(RUNS), steps: int = 300, lrs=(0.05, 0.2), width: int = 16,
          rows: int = 16, momentum: float = 0.9, warmup: int | None = None,
          seed: int = 0, steep: float = 1.0) -> Runs:
    """Train the 4-stage MLP once per label of :data:`RUNS` and learning rate (same data,
    same start), all in one compiled program: ``{lr: {label: Curve}}`` (a :class:`Runs`,
    whose ``program`` is that compiled program).

    Raises:
        ArgumentError, ArgumentTypeError: an unknown or no label; steps outside 8..5000;
            a learning rate, width, rows, momentum (0 <= beta < 1) that does not fit; more
            work than a few seconds.
        DeviceSetupError: fewer than 4 devices.
    """
    labels, lrs = _names(labels), _rates(lrs)
    steps = validate.integer("steps", steps, minimum=2 * STAGES, maximum=5000)
    width = validate.integer("width", width, maximum=256)
    rows = validate.integer("rows", rows, maximum=1024)
    momentum = validate.number("momentum", momentum, minimum=0.0)
    if momentum >= 1:
        raise ArgumentError(f"momentum must be below 1, got {momentum:g} (0.9 is usual).")
    steep = validate.number("steep", steep, positive=True)
    seed = validate.integer("seed", seed, minimum=0)
    if warmup is not None:
        warmup = validate.integer("warmup", warmup, minimum=1)
    validate.bounded("steps x runs x rows x width^2 (the work)",
                     steps * len(labels) * len(lrs) * rows * width * width, 2e9,
                     "Train fewer steps, runs or a narrower MLP.")
    devices = chosen_devices()
    if len(devices) < STAGES:
        raise DeviceSetupError(f"the run needs {STAGES} devices, only {len(devices)}; call "
                               f"tpviz.setup_devices({STAGES}) in a fresh kernel.")
    mesh = make_mesh((STAGES,), (AXIS,), devices=devices[:STAGES])
    rng = np.random.default_rng(seed)
    teacher = init([width] * (STAGES + 1), seed=seed + 100)

    def targets(x):
        for w, b in teacher:
            x = np.tanh(x @ (steep * w) + b)  # a steeper teacher: something to learn
        return x.astype(np.float32)

    xs = rng.standard_normal((steps, rows, width), dtype=np.float32)
    x_eval = rng.standard_normal((4 * rows, width), dtype=np.float32)
    params = init([width] * (STAGES + 1), seed=seed)
    w0 = np.stack([w for w, _ in params])
    b0 = np.stack([b for _, b in params])
    program = _program(mesh, STAGES, STAGES + 2, momentum, 0.9)
    warmup = steps // 4 if warmup is None else warmup
    runs = [(lr, label) for lr in lrs for label in labels]
    tables = [_tables(label, steps, lr, warmup) for lr, label in runs]
    fwd, bwd, update, rate, lag = (np.stack([t[k] for t in tables]) for k in range(5))
    args = (w0, b0, xs, targets(xs), fwd, bwd, update, rate, lag, x_eval, targets(x_eval))
    # host arguments: with several processes, compile for their shapes and place them on call
    shapes = args if jax.process_count() == 1 else tuple(
        jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args)
    lowered = program.lower(*shapes)
    try:  # XLA's backend optimisation off: compiles in a few seconds instead of a minute
        run = lowered.compile(compiler_options={"xla_backend_optimization_level": 0})
    except Exception:  # a backend without the option
        run = lowered.compile()
    losses = verify.host(compiled.placing(run)(*args), np.float32)[0]
    out = Runs({lr: {} for lr in lrs})
    out.program = run
    for i, ((lr, label), t) in enumerate(zip(runs, tables, strict=True)):
        out[lr][label] = Curve(label, losses[i], t[5], t[6])
    return out


def _names(labels) -> tuple[str, ...]:
    if isinstance(labels, str) or not hasattr(labels, "__iter__"):
        raise ArgumentTypeError(f"labels must be a tuple of run names such as "
                                f"('synchronous', 'PipeDream'), got {labels!r}.")
    labels = tuple(validate.choice("labels[i]", x, RUNS) for x in labels)
    if not labels:
        raise ArgumentError(f"labels is empty; choose some of {list(RUNS)}.")
    return labels


def _rates(lrs) -> tuple[float, ...]:
    if isinstance(lrs, str) or not hasattr(lrs, "__iter__"):
        raise ArgumentTypeError(f"lrs must be a tuple of learning rates such as (0.05, 0.2), "
                                f"got {lrs!r}.")
    lrs = tuple(validate.number("lrs[i]", x, positive=True) for x in lrs)
    if not lrs or len(set(lrs)) != len(lrs):
        raise ArgumentError(f"lrs must hold one or more different learning rates, got {lrs}.")
    return lrs


def _tables(label: str, steps: int, lr: float, warmup: int):
    """Per (step, stage): forward and backward versions, microbatches per update at the steps
    that update (else 0), learning rate, PipeMare's prediction lag; the two delays."""
    name, fixes = RUNS[label]
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
