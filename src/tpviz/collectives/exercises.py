"""Checkers for chapter 1: collectives and data parallelism."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from tpviz.collectives import buckets
from tpviz.collectives.plan import crossover, plan
from tpviz.core import harness
from tpviz.core.exercises import (
    Wrong,
    as_bool,
    as_number,
    checker,
    expect_bytes,
    expect_number,
    only_keys,
)

# Exercise 1: a ring all-reduce of V = 400 MB (100 M float32 gradients) over N = 8 devices
RING_V, RING_K = 400e6, 8
# Exercise 2: a parameter server with N = 64 workers, V = 0.2 GB, a 25 GB/s server link
PS_K, PS_V, PS_BETA = 64, 0.2e9, 25e9
# Exercise 3: tree against ring, N = 16, α = 10 µs, β = 10 GB/s
CROSS_K, CROSS_ALPHA, CROSS_BETA = 16, 10e-6, 10e9
# Exercise 6: 8 layers, 1 ms of backward and 4 MB of gradient each; ring over N = 8,
# α = 100 µs, β = 10 GB/s
BUCKET_TIMES, BUCKET_BYTES = [1e-3] * 8, [4e6] * 8
BUCKET_K, BUCKET_ALPHA, BUCKET_BETA = 8, 100e-6, 10e9

# Exercise 5: does the data-parallel step equal the single-device step on the whole batch?
STATEMENTS = {
    "a": "each device averages the loss over its B/N examples; the gradients are averaged "
         "with an all-reduce",
    "b": "as (a), but the batch of 32 is split 10, 10, 12 over 3 devices",
    "c": "as (a), and the model has batch norm, each device normalising with its own examples' "
         "mean and variance",
    "d": "each device sums its examples' losses; the gradients are summed with an all-reduce "
         "and divided by B",
    "e": "as (a), and the model has layer norm (statistics per example)",
}
TRUTH = {"a": True, "b": False, "c": False, "d": True, "e": True}


def _number(answer) -> float:
    """The answer as a float (NumPy scalars and Fractions too); Wrong for anything else."""
    try:
        return as_number(answer)
    except Wrong:
        raise Wrong(f"give a number, not {answer!r}.") from None


@checker("Bytes of a ring all-reduce")
def check_ring_bytes(answer) -> str:
    """Bytes each device sends in a ring all-reduce of V = 400 MB over 8 devices."""
    p = plan("ring", "all-reduce", RING_K, RING_V)
    if answer == 2 * RING_V:
        raise Wrong("that is 2V, the limit for very many devices.",
                    "Each device sends N−1 chunks in each of the two phases; a chunk is V/N.")
    if answer == (RING_K - 1) / RING_K * RING_V:
        raise Wrong("that is one phase only (the reduce-scatter).",
                    "After the reduce-scatter comes an all-gather of the same size.")
    if answer == 2 * (RING_K - 1) * RING_V:
        raise Wrong("that sends the whole array at every step.", "Each step moves one chunk, V/N.")
    expect_bytes(answer, p.bytes_per_device,
                 hint="Count the steps, and the bytes of one chunk.")
    return f"2(N−1)/N · V = {p.bytes_per_device / 1e6:,.0f} MB, the lower bound."


@checker("The parameter server's bottleneck")
def check_server_seconds(answer) -> str:
    """Seconds of one step's communication at the server (receive, then send back)."""
    answer = _number(answer)
    p = plan("parameter-server", "all-reduce", PS_K, PS_V)
    want = p.time(0.0, PS_BETA)
    if math.isclose(answer, 2 * PS_V / PS_BETA, rel_tol=1e-6):
        raise Wrong("that is what one worker sends and receives.",
                    "The server's single link carries every worker's gradients.")
    if math.isclose(answer, PS_K * PS_V / PS_BETA, rel_tol=1e-6):
        raise Wrong("that is one direction only.", "First all gradients arrive, then the sums "
                    "leave, one after the other.")
    expect_number(answer, want, rel=1e-6, hint="Bytes through the server's link, over β.")
    return f"2·N·V/β = {want:.3g} s, growing with N: the reason for all-reduce."


@checker("Where the ring overtakes the tree")
def check_crossover(answer) -> str:
    """Message size (bytes) at which the ring and the tree all-reduce take equal time."""
    _number(answer)
    want = crossover("tree", "ring", CROSS_K, CROSS_ALPHA, CROSS_BETA)
    n = int(math.log2(CROSS_K))
    ring_steps, tree_steps = 2 * (CROSS_K - 1), 2 * n
    only_reduce = (ring_steps - n) * CROSS_ALPHA * CROSS_BETA / (n - 2 * (CROSS_K - 1) / CROSS_K)
    if math.isclose(answer, only_reduce, rel_tol=1e-3):
        raise Wrong("your tree only reduces: it also has to broadcast the sum back down.",
                    "The tree takes 2·log₂N steps, each moving the whole V.")
    if math.isclose(answer, (ring_steps - tree_steps) * CROSS_ALPHA * CROSS_BETA / (
            2 * n - 2), rel_tol=1e-3):
        raise Wrong("the ring sends 2(N−1)/N · V per device, not 2V.",
                    "Use the exact bytes, not the large-N limit.")
    expect_number(answer, want, rel=1e-3, hint="Write both times as steps·α + bytes/β, set "
                  "them equal and solve for V.")
    return (f"V ≈ {want / 1e3:,.0f} KB: smaller messages are latency-bound (the tree wins), "
            "larger ones bandwidth-bound (the ring wins).")


RING_AXIS = "ring"  # not the chapter's "X": an answer must use the axis it is given


def _ring_program(fn, case):
    k = case.n
    return jax.shard_map(lambda v: fn(v, RING_AXIS, k), mesh=case.mesh,
                         in_specs=PartitionSpec(RING_AXIS), out_specs=PartitionSpec(RING_AXIS),
                         check_vma=False)


def _ring_neighbours(case, found) -> str | None:
    k = case.n
    rings = ({(i, (i + 1) % k) for i in range(k)}, {((i + 1) % k, i) for i in range(k)})
    if any(set(c.groups) not in rings for c, _ in found if c.kind == "collective-permute"):
        return ("some sends go to a device that is not a ring neighbour, or not every device "
                "sends at each step")
    return None


RING = harness.Build(
    what="your reduce-scatter", layouts=("x[I_{ring}]",), out="x[I_{ring}]", axes=(RING_AXIS,),
    program=_ring_program,
    cases=(((8,), {"n": 64}), ((8,), {"n": 24}), ((4,), {"n": 32})),
    inputs=lambda s, rng: (rng.standard_normal(s["devices"] * s["n"], dtype=np.float32),),
    reference=lambda x, case: x.reshape(case.n, case.n, -1).sum(0).reshape(-1),
    collectives=lambda case: [harness.Expect(
        "collective-permute", 4 * case.sizes["n"] // case.n, (RING_AXIS,), count=case.n - 1,
        what="one chunk")],
    extra=_ring_neighbours,
    # the library's ring, and the plan whose moves say which chunk goes where at each step
    unavailable=("tpviz.collectives.follow", "tpviz.collectives.program",
                 "tpviz.collectives.run.psum_program", "tpviz.collectives.run._tables",
                 "tpviz.collectives.plan.plan"),
    hint="Use only jax.lax.ppermute to a ring neighbour. At step s device i sends one chunk to "
         "device i + 1, which adds it to its own copy of that chunk; after K − 1 steps each "
         "device holds the sum of its chunk. Which chunk must device i send at step s?",
    praise="The ring of chapter 1, one chunk per step.", rtol=1e-4, atol=1e-4)


@checker("Ring reduce-scatter with ppermute")
def check_ring_reduce_scatter(fn) -> str:
    """``fn(x, axis, k)``: per-device ring reduce-scatter of ``x: f32[n]`` over ``axis`` (k
    devices), returning this device's reduced chunk ``f32[n/k]``; run on rings of 8 and 4
    devices at several sizes, with exactly k − 1 collective-permutes of one chunk between
    neighbours (loops counted)."""
    return harness.grade(fn, RING)


@checker("When data parallelism equals the big batch")
def check_same_as_big_batch(answers) -> str:
    """A dict from the keys of ``STATEMENTS`` to True (equal) or False. The message never says
    which statement is wrong, nor how many (that would let a few tries find the answer)."""
    if not isinstance(answers, dict) or set(answers) != set(STATEMENTS):
        raise Wrong(f"give a dict with the keys {sorted(STATEMENTS)} and True or False values.")
    try:
        values = {k: as_bool(answers[k], f"({k})") for k in STATEMENTS}
    except Wrong:
        raise Wrong("each value should be True or False.") from None
    if any(values[k] is not TRUTH[k] for k in STATEMENTS):
        raise Wrong("not all of them are right (the check does not say which).",
                    "The big-batch gradient is the mean over all B examples of each example's "
                    "gradient. Is every device's share weighted 1/B, and does each example's "
                    "gradient depend only on that example?")
    return "Right: equal shares and per-example computation make the average exact."


def dp_loss(params, x, y):
    """The exercise's model: the mean squared error of a linear layer."""
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def _dp_inputs(s: dict, rng) -> tuple:
    params = {"w": rng.standard_normal((s["D"], s["O"]), dtype=np.float32) / 4,
              "b": rng.standard_normal(s["O"], dtype=np.float32)}
    return (params, rng.standard_normal((s["B"], s["D"]), dtype=np.float32),
            rng.standard_normal((s["B"], s["O"]), dtype=np.float32))


def _dp_diagnose(case, got, want) -> str | None:
    try:
        if np.allclose(got["w"], case.n * np.asarray(want["w"]), rtol=1e-4):
            return (f"the gradient is {case.n} times too large: the devices' shares are summed, "
                    "not averaged. (With check_vma=True, JAX's default, the gradient with "
                    "respect to parameters every device holds whole comes out summed over the "
                    "devices already, with no collective in your code.)")
    except (TypeError, KeyError, IndexError, ValueError):
        return None
    return None


def _gradient_all_reduces(case, found) -> str | None:
    grad_bytes = sum(int(np.asarray(v).nbytes) for v in case.args[0].values())
    if any(c.kind == "all-gather" for c, _ in found):
        return "it gathers data that each device could reduce instead"
    if {c.kind for c, _ in found} != {"all-reduce"}:
        return "data parallelism needs only an all-reduce of the gradients"
    reduced = sum(c.full_bytes for c, _ in found)
    if reduced != grad_bytes:
        return (f"its all-reduces move {reduced:,} bytes in all; the gradient is {grad_bytes:,} "
                "bytes, all-reduced once")
    return None


DP = harness.Build(
    what="your data-parallel step", names=("params", "x", "y"),
    layouts=(PartitionSpec(), PartitionSpec("data"), PartitionSpec("data")), out=PartitionSpec(),
    axes=("data",), vma="either", inputs=_dp_inputs,
    cases=(((8,), {"B": 64, "D": 16, "O": 4}), ((4,), {"B": 16, "D": 6, "O": 3})),
    reference=lambda params, x, y: jax.grad(dp_loss)(params, x, y),
    out_names=("the gradient of b", "the gradient of w"), diagnose=_dp_diagnose,
    extra=_gradient_all_reduces,
    unavailable=("tpviz.collectives.dp_step_shard_map", "tpviz.collectives.dp_step_jit",
                 "tpviz.collectives.check_dp"),
    hint="Each device's gradient of the mean over its own examples is one share; how are the "
         "shares combined into the big batch's gradient, on any number of devices?",
    praise="The big batch's gradient, from one all-reduce of the gradients' bytes.",
    rtol=1e-4, atol=1e-6)


@checker("Data-parallel gradients")
def check_dp_gradients(fn) -> str:
    """``fn(params, x, y)`` per device along "data": params whole, x and y this device's
    examples; returns the gradient of ``dp_loss`` over the whole batch, on every device. Run on
    8 and 4 devices at several sizes, inside ``jax.shard_map`` with ``check_vma=True`` (JAX's
    default) or ``False`` (an answer right under either passes); the compiled program must
    all-reduce exactly the gradient's bytes."""
    return harness.grade(fn, DP)


BUCKET_LIMIT = 5e-3  # 1.7's bound on the exposed communication: about half of 9.8 ms


def _bucket_bytes(answer) -> float:
    try:
        size = as_number(answer)
    except Wrong:  # infinity is a size here (one bucket for everything); NaN is not
        infinite = isinstance(answer, float | np.floating) and answer == math.inf
        size = math.inf if infinite else -1.0
    if not size >= 0:
        raise Wrong(f"give bucket_bytes as a size in bytes (a number >= 0), not {answer!r}.")
    return size


@checker("A bucket size that hides the communication")
def check_bucket_size(answer) -> str:
    """``{"bucket_bytes": …, "all_reduces": …, "exposed_ms": …}``: a bucket size that leaves at
    most 5 ms of communication exposed for the exercise's model (several sizes do), with the
    number of all-reduces it launches and the exposed time ``buckets.simulate`` gives for it.
    A size alone (the form of earlier editions) is judged on the size only."""
    if not isinstance(answer, dict):
        answer = {"bucket_bytes": answer}
    answer = only_keys(answer, ("bucket_bytes", "all_reduces", "exposed_ms"),
                       required=("bucket_bytes",))
    size = _bucket_bytes(answer["bucket_bytes"])
    kw = {"devices": BUCKET_K, "alpha": BUCKET_ALPHA, "beta": BUCKET_BETA}
    mine = buckets.simulate(BUCKET_TIMES, BUCKET_BYTES, size, **kw)
    n, exposed = len(mine.buckets), mine.exposed
    if exposed > BUCKET_LIMIT * (1 + 1e-9):
        _best, line = buckets.best_bucket(BUCKET_TIMES, BUCKET_BYTES, **kw)
        why = ("every all-reduce pays 14 α" if n > len(line.buckets)
               else "the last bucket waits for the end of the backward pass")
        raise Wrong(f"with {n} bucket(s) {exposed * 1e3:.2f} ms of communication is exposed, "
                    f"more than {BUCKET_LIMIT * 1e3:g} ms: {why}.",
                    "Try each way of grouping the 8 gradients with buckets.simulate and compare "
                    ".exposed.")
    if "all_reduces" in answer and as_number(answer["all_reduces"]) != n:
        raise Wrong(f"a bucket size of {size:,.0f} bytes launches {n} all-reduces, not "
                    f"{answer['all_reduces']}.", "Count the buckets: len(line.buckets).")
    if "exposed_ms" in answer:
        expect_number(answer["exposed_ms"], exposed * 1e3, what="exposed_ms", rel=1e-3,
                      hint="Read .exposed of buckets.simulate's timeline for your size; it is "
                           "in seconds.")
    one_each = buckets.simulate(BUCKET_TIMES, BUCKET_BYTES, 0, **kw).exposed
    return (f"{n} all-reduces: {exposed * 1e3:.2f} ms exposed, against {one_each * 1e3:.2f} ms "
            "with one bucket per layer. Buckets of 3 or of 4 gradients both stay under "
            f"{BUCKET_LIMIT * 1e3:g} ms: fewer all-reduces pay α less often, but a bigger last "
            "bucket starts later.")
