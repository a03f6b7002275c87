"""Checkers for the expert-parallelism chapter: capacity, drops, the aux loss, the all-to-all."""

from __future__ import annotations

import functools
import math

import numpy as np

from tpviz.core import harness, validate
from tpviz.core.collectives import Collective
from tpviz.core.exercises import (
    Wrong,
    as_number,
    checker,
    expect_bytes,
    expect_number,
    plain,
)
from tpviz.errors import TpvizError
from tpviz.moe.plan import aux_loss, capacity, keep, route, softmax, top_k
from tpviz.moe.synthetic import skewed_logits

# the library's answers to 10.3 and 10.4 (and the functions built on them)
ROUTING = ("tpviz.moe.plan.keep", "tpviz.moe.plan.route", "tpviz.moe.run.dispatch_tensors")
AUX = ("tpviz.moe.plan.aux_loss", "tpviz.moe.run.dispatch_tensors")

# The chapter's routing example and Exercise 10.3: 8 tokens, top-2 of 4 experts; row t = token
# t's (first, second) choice
CHOICES = np.array([[0, 1], [0, 2], [1, 0], [0, 3], [0, 1], [2, 0], [0, 1], [3, 0]])
# Exercise 10.2: another group of 8 tokens (its answer is not printed in the chapter)
DROP_CHOICES = np.array([[1, 0], [1, 2], [1, 3], [2, 1], [1, 0], [3, 2], [1, 2], [0, 1]])


@checker("Capacity")
def check_capacity(answer) -> str:
    """C for a group of T_g = 1,000 tokens, E = 16 experts, top-2, capacity factor 1.1."""
    exact = 2 * 1000 * 1.1 / 16  # 137.5
    if isinstance(answer, float) and not answer.is_integer():
        raise Wrong(f"{answer} is not a whole number of slots.", "Round the slots up: ⌈...⌉.")
    if answer == math.floor(exact):
        raise Wrong("that rounds down: the average load would not fit.", "C = ⌈k·T_g·c_f / E⌉.")
    if answer == math.ceil(1000 * 1.1 / 16):
        raise Wrong("that counts one choice per token.", "Each token makes k choices.")
    if answer == math.ceil(2 * 1000 / 16):
        raise Wrong("that leaves out the capacity factor.", "Multiply the average load by c_f.")
    expect_number(answer, capacity(1000, 16, 2, 1.1), hint="C = ⌈k·T_g·c_f / E⌉.")
    return "138 slots per expert: 2,208 in all for 2,000 choices, 10% spare."


@checker("Fraction dropped")
def check_dropped(answer) -> str:
    """The fraction of token-choices dropped for :data:`DROP_CHOICES` with cf = 1.0."""
    c = capacity(8, 4, 2, 1.0)
    loads = np.bincount(DROP_CHOICES.ravel(), minlength=4)
    over = np.maximum(loads - c, 0).sum()
    if answer == over:
        raise Wrong("that is the number of dropped choices, not the fraction.",
                    "Divide by the T·k choices.")
    if answer == over / len(DROP_CHOICES):
        raise Wrong("that divides by the tokens.", "Each of the 8 tokens makes 2 choices.")
    if answer == np.maximum(np.bincount(DROP_CHOICES[:, 0], minlength=4) - c, 0).sum() / 16:
        raise Wrong("that counts only the first choices against the slots.",
                    "Every choice, first or second, takes a slot of its expert.")
    expect_number(answer, over / DROP_CHOICES.size, hint="Count the choices per expert: an "
                  "expert keeps at most C of them; the rest are dropped.")
    return (f"{over} of {DROP_CHOICES.size} choices: expert 1 is chosen {loads[1]} times and "
            f"has C = {c} slots.")


@checker("GShard's drop order")
def check_keep(fn) -> str:
    """``fn(experts, num_experts, capacity)`` -> bool [T, k]: the choices that fit, on fixed
    cases and one drawn at each check."""
    cases = [(CHOICES, 4, 4), (CHOICES, 4, 2)]
    rng, drawn = np.random.default_rng(0), np.random.default_rng()  # drawn: new at each check
    e = int(drawn.integers(3, 9))
    sizes = (int(drawn.integers(8, 33)), e, int(drawn.integers(1, min(e, 4) + 1)),
             int(drawn.integers(1, 6)))
    for (t, e, k, c), r in (((16, 4, 2, 3), rng), ((12, 3, 3, 5), rng), ((10, 5, 1, 1), rng),
                            (sizes, drawn)):
        cases.append((top_k(r.standard_normal((t, e)) + np.linspace(1, 0, e), k)[0], e, c))
    for experts, e, c in cases:
        got = np.asarray(plain(harness.guarded(fn, experts.copy(), e, c, what="your keep",
                                               names=ROUTING), "your keep"))
        want = keep(experts, e, c)
        if got.shape != want.shape or got.dtype != bool:
            raise Wrong(f"keep returned {got.dtype}{list(got.shape)}; expected bool"
                        f"{list(want.shape)}, one entry per token and choice.")
        if (got == want).all():
            continue
        kept = np.bincount(experts[got], minlength=e)
        if kept.max() > c:
            raise Wrong(f"an expert keeps {kept.max()} choices with capacity {c}.",
                        "Slots are numbered 0 … C-1: a choice fits when its slot is < C.")
        t, j = (int(i) for i in np.argwhere(got != want)[0])
        raise Wrong(f"with capacity {c}, token {t}'s choice {j + 1} should be "
                    f"{'kept' if want[t, j] else 'dropped'}.",
                    "GShard fills the slots with every token's first choice (by position) "
                    "before any second choice.")
    return "first choices first, then second choices, each by token position."


@checker("The load-balancing loss")
def check_aux_loss(fn) -> str:
    """``fn(probs[T, E], experts[T, k], weight)`` -> Switch's λ·E·Σ f_i·P_i (λ = ``weight``), on
    fixed cases and one drawn at each check."""
    rng, drawn = np.random.default_rng(1), np.random.default_rng()  # drawn: new at each check
    e = int(drawn.integers(3, 11))
    sizes = (int(drawn.integers(16, 65)), e, int(drawn.integers(1, min(e, 4) + 1)))
    for (t, e, k), r in (((32, 4, 1), rng), ((64, 8, 2), rng), ((30, 6, 3), rng),
                         (sizes, drawn)):
        logits = r.standard_normal((t, e)) + np.linspace(2, 0, e)
        probs, experts = softmax(logits), top_k(logits, k)[0]
        want = aux_loss(probs, experts, 0.01)
        got = plain(harness.guarded(fn, probs, experts, 0.01, what="your aux_loss",
                                    names=AUX), "your aux_loss")
        if isinstance(got, int | float | np.number) and not isinstance(got, bool):
            if math.isclose(got, want / e, rel_tol=1e-6):
                raise Wrong("the loss is E times too small.", "Multiply by the number of "
                            "experts E, so that a balanced router gives λ whatever E is.")
            if k > 1 and math.isclose(got, want * k, rel_tol=1e-6):
                raise Wrong(f"the loss is k = {k} times too large.",
                            "f_i is a fraction of the T·k choices: the f_i sum to 1.")
        expect_number(got, want, what=f"aux_loss for T={t}, E={e}, k={k}", rel=1e-6,
                      hint="f_i: fraction of the choices routed to expert i (counted, not "
                           "differentiable); P_i: mean router probability of expert i.")
    return "a balanced router gives λ; the gradient reaches the router through P."


@checker("All-to-all bytes per device")
def check_all_to_all_bytes(answer) -> str:
    """Bytes one device sends in one dispatch all-to-all: N = 8, E = 64, top-2, c_f = 1.25,
    T_g = 4,096 tokens per device, H = 4,096, bf16."""
    n, e, k, cf, s, h = 8, 64, 2, 1.25, 4096, 4096
    buffer = e * capacity(s, e, k, cf) * h * 2
    if answer == buffer:
        raise Wrong("that is the whole buffer.", "A device keeps the slots of its own experts.")
    if answer == 2 * buffer * (n - 1) // n:
        raise Wrong("that counts 4 bytes per element.", "bf16 is 2 bytes.")
    if answer == e * capacity(s, e, k, 1.0) * h * 2 * (n - 1) // n:
        raise Wrong("that leaves out the capacity factor.", "The buffer holds C slots per expert.")
    expect_bytes(answer, Collective("all-to-all", buffer, n).sent_bytes,
                  hint="Buffer [E, C, H]; a device keeps 1/N of it and sends the rest.")
    return (f"{buffer * (n - 1) // n / 2**20:.0f} MiB per all-to-all; 4 per training step: "
            "dispatch and combine, forward and backward.")


# Exercise 10.8 (design): N = 8 devices, T = 4,096 tokens, H = 4,096, F = 2,048 (fine-grained
# experts), bf16, top-2, a router of skew 0.2; memory per device: expert weights + 4 buffers.
DESIGN = {"devices": 8, "tokens": 4096, "hidden": 4096, "ffn": 2048, "top_k": 2, "skew": 0.2,
          "budget": 2**30, "drop_target": 0.01, "factors": (1.0, 1.25, 1.5, 2.0, 3.0),
          "fewest": 192, "most": 256}


def design_memory(experts: int, capacity_factor: float) -> int:
    """Bytes per device of the design exercise: (E/N) experts of 2·H·F bf16 weights, and the
    dispatch and combine buffers, each sent and received: 4 · E · C · H · 2."""
    d = DESIGN
    c = capacity(d["tokens"] // d["devices"], experts, d["top_k"], capacity_factor)
    return experts // d["devices"] * 2 * d["hidden"] * d["ffn"] * 2 + 4 * experts * c * \
        d["hidden"] * 2


@functools.lru_cache(maxsize=512)
def design_dropped(experts: int, capacity_factor: float) -> float:
    """Fraction dropped with the design exercise's router (seed 0)."""
    d = DESIGN
    logits = skewed_logits(d["tokens"], experts, d["skew"], seed=0)
    return route(logits, d["top_k"], capacity_factor, d["devices"]).dropped


def _design_best(memory_only: bool = False, drops_only: bool = False) -> tuple[int, float]:
    d = DESIGN
    for e in range(32 * d["devices"], 0, -d["devices"]):
        for cf in d["factors"]:
            if not drops_only and design_memory(e, cf) > d["budget"]:
                continue
            if memory_only or design_dropped(e, cf) <= d["drop_target"]:
                return e, cf
    return 0, 0.0


@checker("Choose E and the capacity factor")
def check_design(experts, capacity_factor) -> str:
    """A number of experts E (a multiple of N, from 192 to 256) and a capacity factor from
    :data:`DESIGN` that fit the memory budget and keep drops at most 1 %. Several pairs do;
    the check names the limit a pair breaks."""
    d = DESIGN
    try:
        experts = validate.integer("experts", experts)
    except TpvizError as e:
        raise Wrong(str(e), "E counts whole experts: an int such as 64.") from None
    if experts % d["devices"]:
        raise Wrong(f"E = {experts} does not split over {d['devices']} devices.",
                    "Each device holds E/N whole experts.")
    if not d["fewest"] <= experts <= d["most"]:
        raise Wrong(f"E = {experts}: choose from {d['fewest']} to {d['most']} experts.")
    capacity_factor = as_number(capacity_factor, "the capacity factor")
    if capacity_factor not in d["factors"]:
        raise Wrong(f"choose the capacity factor from {d['factors']}.")
    memory = design_memory(experts, capacity_factor)
    if memory > d["budget"]:
        raise Wrong(f"E = {experts}, cf = {capacity_factor} needs {memory / 2**30:.2f} GiB per "
                    "device: over the budget.", "Count the 4 buffers [E, C, H] too.")
    dropped = design_dropped(experts, capacity_factor)
    if dropped > d["drop_target"]:
        raise Wrong(f"E = {experts}, cf = {capacity_factor} drops {dropped:.1%} of the choices.",
                    "Measure with tpviz.moe.route(...).dropped and raise cf.")
    return (f"E = {experts} experts ({experts // d['devices']} per device) with cf = "
            f"{capacity_factor}: {memory / 2**30:.2f} GiB per device, {dropped:.2%} dropped. "
            "More experts buy parameters; a larger factor buys fewer drops with buffer memory.")
