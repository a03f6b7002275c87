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

Every run is repeated over seeds (the start, the teacher and the data change with the seed),
since one run of a chaotic training loop is an anecdote. Each run executes *alone*: one program,
compiled once for one run, is called once per (learning rate, label, seed). Compiled together
(a leading axis of runs), the program changes with the number of runs and so does the float32
rounding (measured: the losses differ by 1e-6 after the first step when 3 or more runs share
it), which the chaos can amplify; run alone, a run gives the same bits whatever else the call
trains.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.asyncpipe.runs import CONTROLS, RUNS, STAGES, tables, versions  # noqa: F401
from tpviz.core import compiled, validate, verify
from tpviz.core.kinds import ArrayOf, Index, Items, Positive
from tpviz.devices import chosen_devices, make_mesh
from tpviz.errors import ArgumentError, ArgumentTypeError, DeviceSetupError
from tpviz.pipeline.run import init

AXIS = "stage"


@dataclass(frozen=True)
class Curve:
    """One run (a label and a learning rate) over several seeds."""

    label: str
    seeds: tuple[int, ...]
    losses: ArrayOf(2)  # [seeds, steps]: loss of the current weights on the fixed batch
    forward_lag: np.ndarray  # [steps, stages]: updates between the newest and the forward's
    backward_lag: np.ndarray  # [steps, stages]: the same for the backward

    @property
    def finals(self) -> np.ndarray:
        """Per seed: the mean loss of the last tenth of the steps."""
        tail = max(1, self.losses.shape[1] // 10)
        return self.losses[:, -tail:].mean(axis=1)

    def seed(self, seed: Index) -> np.ndarray:
        """The loss curve of one seed."""
        if seed not in self.seeds:
            raise ArgumentError(f"seed = {seed!r} was not run; this curve's seeds are "
                                f"{list(self.seeds)}.")
        return self.losses[self.seeds.index(seed)]


class Runs(dict):
    """``{lr: {label: Curve}}``, and ``program``: the compiled program that trained each run
    (for :func:`tpviz.core.compiled.collectives` and ``memory``)."""

    program: object = None


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


def train(labels: Items = tuple(RUNS), steps: int = 300, lrs: Items = (0.05, 0.2),
          width: int = 16, rows: int = 16, momentum: float = 0.9, warmup: Index | None = None,
          seeds: Items = range(5), steep: Positive = 1.0) -> Runs:
    """Train the 4-stage MLP once per label of :data:`RUNS` or :data:`CONTROLS`, learning
    rate and seed (for one seed, every run has the same data and start): ``{lr: {label:
    Curve}}`` (a :class:`Runs`, whose ``program`` is the compiled program). Each run executes
    alone in the same program, so its curve does not depend on the other runs asked for.

    Raises:
        ArgumentError, ArgumentTypeError: an unknown or no label; steps outside 8..5000;
            a learning rate, width, rows, momentum (0 <= beta < 1) or seed that does not fit;
            more work than a few seconds.
        DeviceSetupError: fewer than 4 devices.
    """
    labels, lrs, seeds = _names(labels), _rates(lrs), _seeds(seeds)
    steps = validate.integer("steps", steps, minimum=2 * STAGES, maximum=5000)
    width = validate.integer("width", width, maximum=256)
    rows = validate.integer("rows", rows, maximum=1024)
    momentum = validate.number("momentum", momentum, minimum=0.0)
    if momentum >= 1:
        raise ArgumentError(f"momentum must be below 1, got {momentum:g} (0.9 is usual).")
    steep = validate.number("steep", steep, positive=True)
    if warmup is not None:
        warmup = validate.integer("warmup", warmup, minimum=1)
    validate.bounded("steps x runs x seeds x rows x width^2 (the work)",
                     steps * len(labels) * len(lrs) * len(seeds) * rows * width * width, 4e9,
                     "Train fewer steps, runs or seeds, or a narrower MLP.")
    devices = chosen_devices()
    if len(devices) < STAGES:
        raise DeviceSetupError(f"the run needs {STAGES} devices, only {len(devices)}; call "
                               f"tpviz.setup_devices({STAGES}) in a fresh kernel.")
    mesh = make_mesh((STAGES,), (AXIS,), devices=devices[:STAGES])
    warmup = steps // 4 if warmup is None else warmup
    table = {(lr, label): tables(label, steps, lr, warmup) for lr in lrs for label in labels}
    run = None
    losses = {}
    for seed in seeds:
        data = _data(seed, steps, rows, width, steep)
        for key, t in table.items():
            args = (*data[:4], *(a[None] for a in t[:5]), *data[4:])
            if run is None:
                run = _compiled(mesh, momentum, args)
            losses[key, seed] = verify.host(run(*args), np.float32)[0, 0]
            if not np.isfinite(losses[key, seed]).all():
                raise ArgumentError(f"train: the run {key[1]!r} at lr = {key[0]:g} (seed {seed}) "
                                    f"diverged to NaN or infinity; use a smaller learning rate "
                                    f"(the chapter's are 0.05 and 0.2).")
    out = Runs({lr: {} for lr in lrs})
    out.program = run
    for (lr, label), t in table.items():
        out[lr][label] = Curve(label, seeds, np.stack([losses[(lr, label), s] for s in seeds]),
                               t[5], t[6])
    return out


def _data(seed: int, steps: int, rows: int, width: int, steep: float):
    """Seed ``seed``'s start (w0, b0), stream (xs and its targets) and fixed batch."""
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
    return w0, b0, xs, targets(xs), x_eval, targets(x_eval)


def _compiled(mesh, momentum: float, args):
    """The program of one run, compiled for the shapes of ``args`` and placing host
    arguments (several processes)."""
    program = _program(mesh, STAGES, STAGES + 2, momentum, 0.9)
    # host arguments: with several processes, compile for their shapes and place them on call
    shapes = args if jax.process_count() == 1 else tuple(
        jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args)
    lowered = program.lower(*shapes)
    try:  # XLA's backend optimisation off: compiles in a few seconds instead of a minute
        run = lowered.compile(compiler_options={"xla_backend_optimization_level": 0})
    except Exception:  # a backend without the option
        run = lowered.compile()
    return compiled.placing(run)


def _names(labels) -> tuple[str, ...]:
    if isinstance(labels, str) or not hasattr(labels, "__iter__"):
        raise ArgumentTypeError(f"labels must be a tuple of run names such as "
                                f"('synchronous', 'PipeDream'), got {labels!r}.")
    labels = tuple(validate.choice("labels[i]", x, {**RUNS, **CONTROLS}) for x in labels)
    if not labels:
        raise ArgumentError(f"labels is empty; choose some of {list(RUNS)}.")
    return labels


def _seeds(seeds) -> tuple[int, ...]:
    if isinstance(seeds, str) or not hasattr(seeds, "__iter__"):
        raise ArgumentTypeError(f"seeds must be a tuple of seeds such as range(5), got "
                                f"{seeds!r}.")
    seeds = tuple(validate.integer("seeds[i]", x, minimum=0) for x in seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ArgumentError(f"seeds must hold one or more different seeds, got {seeds}.")
    return seeds


def _rates(lrs) -> tuple[float, ...]:
    if isinstance(lrs, str) or not hasattr(lrs, "__iter__"):
        raise ArgumentTypeError(f"lrs must be a tuple of learning rates such as (0.05, 0.2), "
                                f"got {lrs!r}.")
    lrs = tuple(validate.number(f"lrs[{i}]", x, positive=True) for i, x in enumerate(lrs))
    if max(lrs, default=0) > 10:
        raise ArgumentError(f"lrs = {lrs}: a learning rate above 10 makes this MLP's SGD "
                            f"diverge at once (the chapter's are 0.05 and 0.2).")
    if not lrs or len(set(lrs)) != len(lrs):
        raise ArgumentError(f"lrs must hold one or more different learning rates, got {lrs}.")
    return lrs
