"""Collectives and data parallelism: plans replayed against the math, run on the mesh, checked
against the compiled programs; bucketing against hand-worked timelines; PyTorch on gloo."""

import math
import multiprocessing
import time

import numpy as np
import pytest
from checking import fails, passes

import tpviz
from tpviz import collectives as C
from tpviz.collectives import buckets
from tpviz.collectives.plan import ALGORITHMS, OPS, CollectivePlan
from tpviz.core.collectives import Collective
from tpviz.errors import ArgumentError, ArgumentTypeError, CheckFailed, WorkerError, WorkerTimeout

KS = (2, 4, 8, 16)


# ---- plans: replayed on arrays, they give the collective --------------------------------------

@pytest.mark.parametrize(("algorithm", "k"), [
    (a, k) for a in ALGORITHMS for k in (*KS, 3, 5, 6)
    if a != "halving-doubling" or k in KS  # which needs a power of two (tested to raise below)
])
def test_replayed_all_reduce_is_the_sum(algorithm, k):
    x = np.random.default_rng(k).normal(size=(k, 3 * k))
    p = C.plan(algorithm, "all-reduce", k, 1000.0)
    final = C.replay(p, x)
    np.testing.assert_allclose(final[:k], np.tile(x.sum(0), (k, 1)), rtol=1e-12)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("algorithm", ("ring", "halving-doubling"))
def test_replayed_gather_and_scatter(algorithm, k):
    x = np.random.default_rng(0).normal(size=(k, 2 * k))
    chunks = x.reshape(k, k, 2)
    gathered = C.replay(C.plan(algorithm, "all-gather", k, 64.0), x)
    np.testing.assert_array_equal(gathered, np.tile(chunks[np.arange(k), np.arange(k)].ravel(),
                                                    (k, 1)))
    scattered = C.replay(C.plan(algorithm, "reduce-scatter", k, 64.0), x).reshape(k, k, 2)
    np.testing.assert_allclose(scattered[np.arange(k), np.arange(k)], chunks.sum(0))


def test_a_wrong_plan_does_not_replay_to_the_sum():
    p = C.plan("ring", "all-reduce", 4, 16.0)
    broken = CollectivePlan("ring", "all-reduce", 4, 16.0, p.moves[:-1])  # one step short
    x = np.arange(16.0).reshape(4, 4)
    assert not np.allclose(C.replay(broken, x), np.tile(x.sum(0), (4, 1)))


@pytest.mark.parametrize("k", KS)
def test_steps_and_bytes_from_the_math(k):
    v, log = 1024.0 * k, int(math.log2(k))
    expect = {  # (steps, bytes the busiest device sends)
        "parameter-server": (2, k * v),
        "naive": (2 * (k - 1), (k - 1) * v),
        "tree": (2 * log, log * v),
        "ring": (2 * (k - 1), 2 * (k - 1) / k * v),
        "halving-doubling": (2 * log, 2 * (k - 1) / k * v),
    }
    for algorithm, (steps, sent) in expect.items():
        p = C.plan(algorithm, "all-reduce", k, v)
        assert (len(p.steps), p.bytes_per_device) == (steps, sent), algorithm
        assert p.bytes_per_device >= C.lower_bound(k, v)
    assert all(isinstance(s, tuple) and len(s) == 3 for step in p.steps for s in step)


def test_ring_time_is_the_core_collectives_ring_cost():
    alpha, beta, v = 3e-6, 2e10, 8e6
    for k in (2, 5, 8, 64):
        ring = C.plan("ring", "all-reduce", k, v)
        want = Collective("all-reduce", int(v), k).time(beta, alpha)
        assert ring.time(alpha, beta) == pytest.approx(want, rel=1e-12)
        assert ring.collective().sent_bytes == pytest.approx(ring.bytes_per_device)


def test_parameter_server_reproduces_the_lecture():
    """ResNet-50: 0.1 GB of gradients, 256 workers, 300 GB/s: 2KV/β ≈ 0.17 s (0.16 s with
    GB/s read as 2^30 bytes per second); the ring needs 2(N-1)/N·V/β ≈ 0.67 ms."""
    ps = C.plan("parameter-server", "all-reduce", 256, 0.1e9)
    assert ps.time(0, 300e9) == pytest.approx(2 * 256 * 0.1e9 / 300e9)
    assert round(ps.time(0, 300 * 2**30), 2) == 0.16
    assert C.plan("ring", "all-reduce", 256, 0.1e9).time(0, 300e9) == pytest.approx(
        2 * 255 / 256 * 0.1e9 / 300e9)


def test_crossover_by_hand():
    # tree 8 steps of V; ring 30 steps of V/16: 8α + 8V/β = 30α + 1.875V/β
    alpha, beta = 1e-5, 1e10
    v = C.crossover("tree", "ring", 16, alpha, beta)
    assert v == pytest.approx(22 * alpha * beta / 6.125)
    tree, ring = C.plan("tree", "all-reduce", 16, v), C.plan("ring", "all-reduce", 16, v)
    assert tree.time(alpha, beta) == pytest.approx(ring.time(alpha, beta))
    assert C.crossover("ring", "halving-doubling", 16, alpha, beta) is None  # same bytes


@pytest.mark.parametrize(("args", "words"), [
    (("halving-doubling", "all-reduce", 6, 10), r"power of two.*'ring'.*4 or 8"),
    (("ring", "all-reduce", 0, 10), r"devices must be a positive integer, got 0"),
    (("ring", "all-reduce", 4, -1), r"nbytes must be at least 0, got -1"),
    (("tree", "all-gather", 4, 10), r"ring.*halving-doubling"),
    (("butterfly", "all-reduce", 4, 10), r"not one of the choices"),
])
def test_bad_input_says_what_to_do(args, words):
    with pytest.raises(ArgumentError, match=words):
        C.plan(*args)


# ---- run: ppermute programs against psum, and their compiled sends -----------------------------

@pytest.fixture(scope="module")
def mesh():
    return tpviz.make_mesh((8,), ("X",))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("algorithm", ("ring", "halving-doubling"))
def test_shard_map_equals_psum_and_compiles_to_the_plan(mesh, algorithm, op):
    x = np.random.default_rng(3).normal(size=(8 * 64,)).astype(np.float32)
    v = 64 * 4 * (8 if op == "all-gather" else 1)  # bytes each device reduces (or gathers)
    p = C.plan(algorithm, op, 8, v)
    result = C.check_plan(p, mesh, x)  # raises if values or compiled sends differ
    assert result.max_error < 1e-5
    assert len(result.found) == len(p.steps) == {"ring": 14, "halving-doubling": 6}[
        algorithm] // (1 if op == "all-reduce" else 2)
    assert [c.bytes for c in result.found] == [s[0].nbytes for s in p.steps]


def test_check_catches_a_plan_that_lies(mesh):
    x = np.ones(8 * 64, np.float32)
    with pytest.raises(CheckFailed, match="collectives"):
        C.check_plan(C.plan("ring", "all-reduce", 8, 2 * 64 * 4), mesh, x)  # says twice the bytes


def test_run_refuses_plans_it_cannot_follow(mesh):
    with pytest.raises(ArgumentError, match="'ring' and 'halving-doubling'"):
        C.follow(C.plan("tree", "all-reduce", 8, 64.0), "X")
    with pytest.raises(ArgumentError, match="plan for 8 devices"):
        C.program(C.plan("ring", "all-reduce", 4, 64.0), mesh)


def test_data_parallel_equals_one_device(mesh):
    from tpviz.collectives.run import init_mlp

    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(32, 8)).astype(np.float32), rng.normal(size=(32, 4)).astype(np.float32)
    params = init_mlp(0, (8, 32, 4))
    result = C.check_dp(mesh, params, x, y)
    assert result.max_error < 1e-6
    assert result.predicted.bytes == (8 * 32 + 32 + 32 * 4 + 4) * 4


# ---- bucketing against hand-worked timelines --------------------------------------------------

RING8 = {"devices": 8, "alpha": 1e-5, "beta": 1e9}  # an all-reduce of V: 14α + 1.75 V/β


def test_one_bucket_exposes_the_whole_all_reduce():
    line = buckets.simulate([1e-3] * 4, [1e6] * 4, math.inf, **RING8)
    assert len(line.buckets) == 1
    assert line.exposed == pytest.approx(14e-5 + 1.75 * 4e6 / 1e9)


def test_one_bucket_per_layer():
    # each all-reduce 14α + 1.75 MB/β = 1.89 ms; backward 1 ms per layer: the stream falls
    # behind; it ends at 1 + 4·1.89 ms, the backward at 4 ms
    line = buckets.simulate([1e-3] * 4, [1e6] * 4, 0, **RING8)
    assert [b.grads for b in line.buckets] == [(0,), (1,), (2,), (3,)]
    assert line.exposed == pytest.approx(1e-3 + 4 * 1.89e-3 - 4e-3)
    # slow layers (3 ms): each all-reduce ends before the next gradient; only the last shows
    slow = buckets.simulate([3e-3] * 4, [1e6] * 4, 0, **RING8)
    assert slow.exposed == pytest.approx(1.89e-3)


def test_infinite_bandwidth_leaves_only_latency():
    line = buckets.simulate([1e-3] * 4, [1e6] * 4, 2e6, devices=8, alpha=1e-5, beta=math.inf)
    assert len(line.buckets) == 2 and line.exposed == pytest.approx(14e-5)
    free = buckets.simulate([1e-3] * 4, [1e6] * 4, 2e6, devices=8, alpha=0, beta=math.inf)
    assert free.exposed == 0


def test_best_bucket_is_between_the_extremes():
    from tpviz.collectives import exercises as ex

    kw = {"devices": ex.BUCKET_K, "alpha": ex.BUCKET_ALPHA, "beta": ex.BUCKET_BETA}
    size, line = buckets.best_bucket(ex.BUCKET_TIMES, ex.BUCKET_BYTES, **kw)
    # 2 buckets of 16 MB: each 14·100 µs + 1.75·16 MB/(10 GB/s) = 4.2 ms, ready at 4 and 8 ms
    # the second waits for the first (ends 8.2 ms), so the stream ends at 12.4 ms
    assert size == 16e6 and line.exposed == pytest.approx(4e-3 + 2 * 4.2e-3 - 8e-3)
    for worse in (0, math.inf):
        assert buckets.simulate(ex.BUCKET_TIMES, ex.BUCKET_BYTES, worse, **kw).exposed > line.exposed


# ---- checkers: the right answer passes, plausible wrong ones fail -----------------------------



def test_check_ring_bytes(capsys):
    ex = tpviz.exercises
    passes(ex.check_ring_bytes, 2 * 7 / 8 * 400e6, capsys=capsys)
    fails(ex.check_ring_bytes, 800e6, words="limit")
    fails(ex.check_ring_bytes, 350e6, words="one phase")
    fails(ex.check_ring_bytes, 2 * 7 * 400e6, words="whole array")
    fails(ex.check_ring_bytes, "700 MB", words="should be a number")


def test_check_server_seconds(capsys):
    ex = tpviz.exercises
    passes(ex.check_server_seconds, 2 * 64 * 0.2e9 / 25e9, capsys=capsys)
    fails(ex.check_server_seconds, 2 * 0.2e9 / 25e9, words="one worker")
    fails(ex.check_server_seconds, 64 * 0.2e9 / 25e9, words="one direction")
    fails(ex.check_server_seconds, None, words="give a number")


def test_check_crossover(capsys):
    ex = tpviz.exercises
    passes(ex.check_crossover, 22 * 1e-5 * 1e10 / 6.125, capsys=capsys)
    fails(ex.check_crossover, 26 * 1e-5 * 1e10 / (4 - 1.875), words="broadcast")
    fails(ex.check_crossover, 22 * 1e-5 * 1e10 / 6, words="not 2V")
    fails(ex.check_crossover, 1e6, words="not right")


def _ring_rs(x, axis, k):
    import jax

    me = jax.lax.axis_index(axis)
    chunks = x.reshape(k, -1)
    for s in range(k - 1):
        piece = jax.lax.dynamic_index_in_dim(chunks, (me - s - 1) % k, keepdims=False)
        got = jax.lax.ppermute(piece, axis, [(i, (i + 1) % k) for i in range(k)])
        chunks = chunks.at[(me - s - 2) % k].add(got)
    return jax.lax.dynamic_index_in_dim(chunks, me, keepdims=False)


def _psum_slice(x, axis, k):
    import jax

    total = jax.lax.psum(x, axis).reshape(k, -1)
    return jax.lax.dynamic_index_in_dim(total, jax.lax.axis_index(axis), keepdims=False)


def _off_by_one(x, axis, k):
    import jax

    me = jax.lax.axis_index(axis)
    chunks = x.reshape(k, -1)
    for s in range(k - 1):
        piece = jax.lax.dynamic_index_in_dim(chunks, (me - s) % k, keepdims=False)
        got = jax.lax.ppermute(piece, axis, [(i, (i + 1) % k) for i in range(k)])
        chunks = chunks.at[(me - s - 1) % k].add(got)
    return jax.lax.dynamic_index_in_dim(chunks, me, keepdims=False)


def _whole_array(x, axis, k):
    import jax

    me, total = jax.lax.axis_index(axis), x
    for _ in range(k - 1):
        x = jax.lax.ppermute(x, axis, [(i, (i + 1) % k) for i in range(k)])
        total = total + x
    return jax.lax.dynamic_index_in_dim(total.reshape(k, -1), me, keepdims=False)


def test_check_ring_reduce_scatter(capsys):
    ex = tpviz.exercises
    passes(ex.check_ring_reduce_scatter, _ring_rs, capsys=capsys)
    fails(ex.check_ring_reduce_scatter, _psum_slice, words="all-reduce .* does not need")
    fails(ex.check_ring_reduce_scatter, _off_by_one, words="wrong values")
    fails(ex.check_ring_reduce_scatter, _whole_array, words="more than one chunk")


def test_check_same_as_big_batch(capsys):
    ex = tpviz.exercises
    passes(ex.check_same_as_big_batch, {"a": True, "b": False, "c": False, "d": True, "e": True},
           capsys=capsys)
    fails(ex.check_same_as_big_batch, dict.fromkeys("abcde", True), words="not all of them")
    fails(ex.check_same_as_big_batch, {"a": True, "b": False, "c": True, "d": True, "e": True},
          words="does not say which")
    fails(ex.check_same_as_big_batch, {"a": True}, words="keys")


def _bucket(size, all_reduces, exposed_ms):
    return {"bucket_bytes": size, "all_reduces": all_reduces, "exposed_ms": exposed_ms}


# By hand: a ring all-reduce of k 4-MB gradients on 8 devices takes 14 α + 1.75 · 4k MB / β
# = 1.4 + 0.7k ms. Buckets of 4 gradients (sizes in (12, 16] MB): the first starts at 4 ms and
# ends at 8.2, the second at 12.4, so 4.4 ms are exposed. Of 3 (sizes in (8, 12] MB): 3 + 3.5
# = 6.5, 6.5 + 3.5 = 10, 10 + 2.8 = 12.8, 4.8 ms. Of 2: 4.8, 7.6, 10.4, 13.2, 5.2 ms. Of 5:
# 5 + 4.9 = 9.9, 9.9 + 3.5 = 13.4, 5.4 ms. One per layer: 1 + 2.1 · 8 = 17.8 ms, 9.8 exposed.
@pytest.mark.parametrize(("size", "all_reduces", "exposed_ms"), [
    (16e6, 2, 4.4), (13e6, 2, 4.4), (12e6, 3, 4.8), (9e6, 3, 4.8)])
def test_check_bucket_size_admits_every_size_within_the_bound(size, all_reduces, exposed_ms,
                                                              capsys):
    passes(tpviz.exercises.check_bucket_size, _bucket(size, all_reduces, exposed_ms),
           capsys=capsys)


def test_check_bucket_size_takes_a_size_alone_as_earlier_editions_did(capsys):
    # the contract: the book's earlier solution (a size in bytes) still passes, and so does a
    # size with only some of its reasons; a wrong reason still fails
    passes(tpviz.exercises.check_bucket_size, 16e6, capsys=capsys)
    passes(tpviz.exercises.check_bucket_size, {"bucket_bytes": 12e6}, capsys=capsys)
    fails(tpviz.exercises.check_bucket_size, {"bucket_bytes": 16e6, "all_reduces": 3},
          words="launches 2 all-reduces, not 3")


@pytest.mark.parametrize(("answer", "words"), [
    (_bucket(4e6, 8, 9.8), "pays 14 α"),  # one bucket per layer
    (_bucket(8e6, 4, 5.2), "5.20 ms .* more than 5 ms"),  # buckets of 2 gradients
    (_bucket(20e6, 2, 5.4), "5.40 ms .* waits for the end"),  # buckets of 5
    (_bucket(math.inf, 1, 7.0), "waits for the end"),  # one bucket
    (_bucket(16e6, 4, 4.4), "launches 2 all-reduces, not 4"),  # the count is wrong
    (_bucket(16e6, 2, 4.8), "exposed_ms"),  # another size's exposed time
    (_bucket(16e6, 2, 0.0044), "exposed_ms"),  # seconds, not ms
    (_bucket(-1, 2, 4.4), "bucket_bytes as a size in bytes"),
    (8e6, "more than 5 ms"),  # the size alone (earlier editions' form), too small
])
def test_check_bucket_size_rejects(answer, words):
    fails(tpviz.exercises.check_bucket_size, answer, words=words)


def test_explore_renders_and_reports_bad_settings():
    html, fig = C.render_collectives("halving-doubling", 8, "1 MB", 5.0, 50.0)
    assert "halving-doubling" in html and fig.axes
    with pytest.raises(ArgumentError, match="power of two"):
        C.render_collectives("halving-doubling", 6, "1 MB", 5.0, 50.0)
    assert "text/html" in C.explore_collectives()._repr_mimebundle_()


# ---- PyTorch on local gloo processes ----------------------------------------------------------

@pytest.fixture(scope="module")
def tr():  # torch is a pinned requirement: without it these tests fail; they never skip
    from tpviz.collectives import torch_run as module

    return module


@pytest.mark.slow
def test_launch_returns_each_workers_result(tr):
    assert tr.launch(tr.rank_sum, 4) == [10.0] * 4
    assert multiprocessing.active_children() == []


@pytest.mark.slow
def test_a_worker_that_raises_is_named(tr):
    with pytest.raises(WorkerError, match=r"worker 1 of 3 raised ValueError: rank 1 was told"):
        tr.launch(tr.fails_on, 3, 1, timeout=20)
    assert multiprocessing.active_children() == []


@pytest.mark.slow
def test_a_worker_that_dies_is_named(tr):
    with pytest.raises(WorkerError, match=r"worker 1 of 2 died \(exit code 3\)"):
        tr.launch(tr.dies_on, 2, 1, timeout=20)
    assert multiprocessing.active_children() == []


@pytest.mark.slow
def test_a_worker_that_hangs_times_out(tr):
    start = time.monotonic()
    with pytest.raises(WorkerTimeout, match=r"\[0, 1, 2\] of 3 did not finish within 2 s"):
        tr.launch(tr.hangs_on, 3, 1, timeout=2)
    assert time.monotonic() - start < 60  # 2 s, plus starting the forkserver if first
    assert multiprocessing.active_children() == []


def test_launch_refuses_a_lambda(tr):
    with pytest.raises(ArgumentTypeError, match="top level of a module"):
        tr.launch(lambda rank, world: rank, 2)


@pytest.mark.slow
def test_ddp_equals_full_batch(tr):
    reference = tr.full_batch_gradients()
    for grads in tr.launch(tr.ddp_gradients, 4):
        for name, g in reference.items():
            np.testing.assert_allclose(grads[name], g, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_all_reduce_calls_fall_as_buckets_grow(tr):
    caps = (0.05, 0.1, 0.2, 1.0)
    (calls,) = tr.launch(tr.all_reduce_calls, 1, caps)[:1]
    layers, width = 6, 128
    grad_bytes = [width * 4, width * width * 4] * layers  # backward order: bias, weight, ...
    counts = [len(calls[cap][1]) for cap in caps]  # the second step (buckets rebuilt)
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1] == 1
    for cap in caps:
        want = [sum(grad_bytes[i] for i in b) for b in buckets.assign(grad_bytes, cap * 2**20)]
        assert calls[cap][1] == want
    assert all(calls[cap][0] == [sum(grad_bytes)] for cap in caps)  # step 1: one bucket
