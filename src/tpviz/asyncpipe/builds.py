"""Chapter 8's build checkers: Chimera's op order built for any even p (8.3), graded on its
paper's bubble at several p; and one PipeDream-2BW update of a pipelined model on the stage
mesh (8.4), on :mod:`tpviz.core.harness`: a forward and a backward passed between the stages
by ``ppermute``, the gradient taken at the version before the newest."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import harness
from tpviz.core.exercises import Wrong, as_integer, checker, plain
from tpviz.errors import TpvizError
from tpviz.pipeline.plan import Op, Schedule
from tpviz.pipeline.simulate import simulate

# --- 8.3 Chimera's schedule --------------------------------------------------------------------
CHIMERA_STAGES = (4, 6, 8)  # p: Chimera pairs device d with p-1-d, so p is even
# and one more p drawn at each check, from 16 even values: a table of orders made in advance
# for a few p fails (each order is built in under a second up to p = 40)
CHIMERA_DRAWN = tuple(range(10, 41, 2))
CHIMERA = ("tpviz.pipeline.plan.schedule", "tpviz.pipeline.plan.chimera",
           "tpviz.pipeline.zoo.build", "tpviz.pipeline.zoo._chimera")


def chimera_bubble(p: int) -> float:
    """Li & Hoefler's bubble for one unit of m = p microbatches, t_F = t_B: (p−2)/(2m+p−2)."""
    return (p - 2) / (2 * p + p - 2)


def _chimera_ops(got, p: int) -> tuple[tuple[Op, ...], ...]:
    try:
        ops = tuple(tuple(Op(str(k), as_integer(i, "a microbatch"), as_integer(c, "a stage"))
                          for k, i, c in device) for device in got)
    except (TypeError, ValueError, Wrong):
        raise Wrong("return one list per device of (kind, microbatch, stage) triples such as "
                    f"('F', 0, 0); got {str(got)[:80]}.") from None
    if len(ops) != p:
        raise Wrong(f"return {p} lists, one per device; got {len(ops)}.")
    return ops


def _chimera_properties(fn, p: int) -> str:
    """Every op once on its device, no deadlock, the paper's bubble, at most p microbatches'
    activations on a device; the ✓ words for this p, or :class:`Wrong`."""
    got = plain(harness.guarded(fn, p, what=f"chimera({p})", names=CHIMERA), "your schedule")
    ops = _chimera_ops(got, p)
    half = p // 2
    for d in range(p):
        want = ({(k, i, d) for i in range(half) for k in "FB"}
                | {(k, i, p - 1 - d) for i in range(half, p) for k in "FB"})
        if set(ops[d]) != want or len(ops[d]) != len(want):
            if all(c == d for _, _, c in ops[d]):
                raise Wrong(f"device {d} runs only stage {d}: that is one pipeline, not two.",
                            f"Microbatches {half} … {p - 1} go up: stage s on device p-1-s.")
            raise Wrong(f"device {d} should run F and B of microbatches 0 … {half - 1} at "
                        f"stage {d} and of {half} … {p - 1} at stage {p - 1 - d}, each once.")
        for i in range(p):
            kinds = [k for k, j, _ in ops[d] if j == i]
            if kinds != ["F", "B"]:
                raise Wrong(f"device {d} runs the B of microbatch {i} before its F.")
    try:
        t = simulate(Schedule("yours", p, p, 1, ops, "bidirectional"), 1.0, 1.0)
    except TpvizError:
        raise Wrong("your order deadlocks: some device waits for an op that waits for it.",
                    "On each device, an op may only wait for ops earlier in other devices' "
                    "lists.") from None
    want_bubble = chimera_bubble(p)
    if t.bubble_fraction > want_bubble + 1e-9:
        raise Wrong(f"valid, but the bubble is {t.bubble_fraction:.1%}; Chimera reaches "
                    f"(p−2)/(2m+p−2) = {want_bubble:.1%} (t_F = t_B).",
                    "On each device, which op becomes ready first, and which should run when "
                    "two are ready?")
    if max(t.peak_activations) > p:
        raise Wrong(f"the bubble is right, but a device holds {max(t.peak_activations)} "
                    f"microbatches' activations at once; Chimera's unit holds at most p = {p}.")
    return f"p = {p}: bubble {t.bubble_fraction:.1%}, peak activations {list(t.peak_activations)}"


@checker("Build: Chimera's schedule")
def check_chimera(fn) -> str:
    """``fn(p)`` → per device, (kind, microbatch, stage) triples of Chimera's unit of m = p
    microbatches (0 … p/2-1 down, stage s on device s; p/2 … p-1 up, stage s on device p-1-s),
    for p = 4, 6, 8 and one even p of 10 … 40 drawn at random, the library's schedules out of
    reach: every op once, no deadlock, the paper's bubble (p−2)/(2m+p−2) at t_F = t_B, at most
    p microbatches held."""
    done = []
    drawn = int(np.random.default_rng().choice(CHIMERA_DRAWN))
    for p in (*CHIMERA_STAGES, drawn):
        try:
            done.append(_chimera_properties(fn, p))
        except Wrong as w:
            if done:
                raise Wrong(f"right for p = {CHIMERA_STAGES[0]}, but for p = {p}: {w.message}",
                            w.hint or "Does your code assume p = 4? Build the order from p.") \
                    from None
            raise Wrong(f"for p = {p}: {w.message}", w.hint) from None
    return "; ".join(done) + ": (p−2)/(2m+p−2), as Li & Hoefler count it."


# --- 8.4 one PipeDream-2BW update of a pipelined model -----------------------------------------
STAGE = ("stage",)
LR = 0.1


def stage_loss(ws, x, target):
    """The pipelined model on one device: h ← tanh(h W_s) for s = 0 … p-1, then
    Σ (h − target)² / (2n)."""
    h = x
    for s in range(ws.shape[0]):
        h = jnp.tanh(h @ ws[s])
    return jnp.sum((h - target) ** 2) / (2 * x.shape[0])


def _two_bw_inputs(s: dict, rng) -> tuple:
    p, h, n = s["devices"], s["H"], s["n"]
    w = (rng.standard_normal((p, h, h)) / np.sqrt(h)).astype(np.float32)
    w_prev = (w + 0.3 * rng.standard_normal((p, h, h)) / np.sqrt(h)).astype(np.float32)
    return (w, w_prev, rng.standard_normal((n, h), dtype=np.float32),
            rng.standard_normal((n, h), dtype=np.float32))


def _two_bw_reference(w, w_prev, x, target, case):
    return np.asarray(w - case.sizes["lr"] * jax.grad(stage_loss)(w_prev, x, target))


def _two_bw_mistakes(case, got, want) -> str | None:
    w, w_prev, x, target = (np.asarray(a) for a in case.args)
    got, lr = np.asarray(got), case.sizes["lr"]
    if got.shape != w.shape or np.allclose(got, want, rtol=1e-4, atol=1e-5):
        return None
    if np.allclose(got, w - lr * np.asarray(jax.grad(stage_loss)(w, x, target)), rtol=1e-4,
                   atol=1e-5):
        return ("that is plain SGD: the gradient at the newest weights w_t. 2BW's gradient "
                "comes from the version before, w_(t−1).")
    if np.allclose(got, w_prev - lr * np.asarray(jax.grad(stage_loss)(w_prev, x, target)),
                   rtol=1e-4, atol=1e-5):
        return ("the update starts from w_(t−1): 2BW applies the gradient to the newest "
                "weights, w_(t+1) = w_t − η ∇f(w_(t−1)).")
    return None


def _two_bw_program(answer, case):
    lr = case.sizes["lr"]
    return jax.shard_map(lambda w, w_prev, x, t: answer(w, w_prev, x, t, lr), mesh=case.mesh,
                         in_specs=(P("stage"), P("stage"), P(), P()), out_specs=P("stage"),
                         check_vma=False)


def _neighbours(case, found) -> str | None:
    far = sorted({tuple(pair) for c, _ in found for pair in c.groups
                  if abs(pair[0] - pair[1]) != 1})
    if far:
        return (f"a send {far[0]} between devices that are not neighbours: a pipeline passes "
                "activations only to the next stage and gradients only to the previous one")
    return None


TWO_BW = harness.Build(
    what="your 2BW update", layouts=("W[S_{stage}, H, K]", "Wprev[S_{stage}, H, K]", "X[N, H]",
                                     "T[N, H]"),
    out="W[S_{stage}, H, K]", axes=STAGE, program=_two_bw_program, inputs=_two_bw_inputs,
    reference=_two_bw_reference, diagnose=_two_bw_mistakes, out_names=("w_(t+1)",),
    cases=(((4,), {"H": 8, "n": 6, "lr": LR}), ((4,), {"H": 6, "n": 10, "lr": 0.05}),
           ((2,), {"H": 8, "n": 6, "lr": 0.2}), ((8,), {"H": 4, "n": 5, "lr": LR})),
    collectives=lambda case: [harness.Expect(
        "collective-permute", case.sizes["n"] * case.sizes["H"] * 4, STAGE,
        count=2 * (case.n - 1), what="one microbatch's activations or gradients")],
    extra=_neighbours,
    unavailable=("tpviz.pipeline.run.loss_fn", "tpviz.pipeline.run.layer_backward_input",
                 "tpviz.pipeline.run.layer_backward_weights", "tpviz.pipeline.spmd.program",
                 "tpviz.asyncpipe.stale.train", "tpviz.asyncpipe.stale._program",
                 "tpviz.asyncpipe.builds.stage_loss"),
    hint="Each stage holds only its own weights: the forward passes its output to the next "
         "stage (p − 1 sends), the backward passes the input gradient to the previous one "
         "(p − 1 sends); the gradient is taken at w_(t−1) and applied to w_t.",
    praise="The stages' 2BW update, exactly, with one send per stage boundary each way.",
    rtol=1e-4, atol=1e-5)


@checker("Build: PipeDream-2BW's update on the stage mesh")
def check_two_bw(fn) -> str:
    """``fn(w, w_prev, x, target, lr)`` per device inside ``shard_map`` over "stage":
    ``w, w_prev[1, H, H]`` this stage's weights w_t and w_(t−1), ``x, target[n, H]`` a
    microbatch on every device; returns this stage's w_(t+1) = w_t − lr ∇f(w_(t−1)) for the
    pipelined model h ← tanh(h W_s), loss Σ(h − target)²/(2n). On 4, 2 and 8 devices at several
    sizes and learning rates, with exactly 2(p − 1) neighbour permutes of one microbatch each."""
    return harness.grade(fn, TWO_BW)
