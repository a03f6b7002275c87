"""Expert parallelism: capacity and drops from hand-worked cases, the aux loss from its formula,
the sharded layers against one device, and the all-to-alls read from the compiled programs."""

import importlib
import math

import numpy as np
import pytest
from checking import fails, passes
from matplotlib.figure import Figure

import tpviz
from tpviz import moe
from tpviz.core import compiled
from tpviz.core.cost import SYSTEMS
from tpviz.core.widgets import Live
from tpviz.errors import ArgumentError, ShardingError

ex = importlib.import_module("tpviz.moe.exercises")
CHOICES = ex.CHOICES


def loop_keep(experts, num_experts, capacity, choice_major=True):
    """The drop rule written as the plain loop of its definition (one group)."""
    t, k = experts.shape
    order = ([(tok, j) for j in range(k) for tok in range(t)] if choice_major
             else [(tok, j) for tok in range(t) for j in range(k)])
    used, kept = [0] * num_experts, np.zeros((t, k), bool)
    for tok, j in order:
        e = experts[tok, j]
        if used[e] < capacity:
            kept[tok, j], used[e] = True, used[e] + 1
    return kept


# --- plan: capacity, routing, drops, aux loss ----------------------------------------------------

@pytest.mark.parametrize(("args", "want"), [((64, 8, 2, 1.25), 20),  # 2·64·1.25/8 = 20 exactly
                                            ((1000, 16, 2, 1.1), 138),  # 137.5, rounded up
                                            ((10, 4, 1, 1.0), 3),  # 2.5
                                            ((100, 8, 2, 1.2), 30),  # 30 (float: 30.000...04)
                                            ((8, 4, 2, 1.0), 4)])
def test_capacity(args, want):
    assert moe.capacity(*args) == want


@pytest.mark.parametrize(("args", "error", "words"), [
    ((64, 8, 9, 1.0), ArgumentError, "more than the 8 experts"),
    ((64, 8, 2, 0.0), ArgumentError, "capacity_factor"),
    ((64, 8, 2, -1.0), ArgumentError, "capacity_factor"),
    ((64, 8, 2, float("nan")), ArgumentError, "capacity_factor"),
    ((64, 0, 1, 1.0), ArgumentError, "experts"),
])
def test_capacity_errors(args, error, words):
    with pytest.raises(error, match=words):
        moe.capacity(*args)


def test_plan_errors():
    with pytest.raises(ShardingError, match="12 experts do not split over 8 devices"):
        moe.plan(64, 12, 2, 1.0, 8)
    with pytest.raises(ShardingError, match="60 tokens do not split"):
        moe.plan(60, 8, 2, 1.0, 8)
    with pytest.raises(ArgumentError, match="top_k=3"):
        moe.plan(64, 2, 3, 1.0, 2)


def test_keep_hand_worked():
    # expert 0 is chosen 8 times (5 first choices: tokens 0, 1, 3, 4, 6; 3 second choices:
    # tokens 2, 5, 7); C = 4: the first four first choices fit, token 6's first choice and
    # every second choice for expert 0 are dropped
    kept = moe.keep(CHOICES, 4, 4)
    dropped = {(int(t), int(j)) for t, j in np.argwhere(~kept)}
    assert dropped == {(6, 0), (2, 1), (5, 1), (7, 1)}
    # token by token instead would drop token 4's first choice and keep token 2's second
    assert loop_keep(CHOICES, 4, 4, choice_major=False)[2, 1]
    assert not loop_keep(CHOICES, 4, 4, choice_major=False)[4, 0]


def test_keep_equals_the_loop_per_group():
    rng = np.random.default_rng(3)
    experts = moe.top_k(rng.standard_normal((48, 6)) + np.linspace(1, 0, 6), 3)[0]
    kept = moe.keep(experts, 6, 5, groups=4)
    for g in range(4):
        rows = slice(12 * g, 12 * (g + 1))
        np.testing.assert_array_equal(kept[rows], loop_keep(experts[rows], 6, 5))


def test_top_k_orders():
    logits = np.log(np.array([[1.0, 4.0, 2.0, 3.0]]))  # probabilities 0.1, 0.4, 0.2, 0.3
    experts, before = moe.top_k(logits, 2, "before")
    np.testing.assert_array_equal(experts, [[1, 3]])
    np.testing.assert_allclose(before, [[0.4, 0.3]])
    _, after = moe.top_k(logits, 2, "after")
    np.testing.assert_allclose(after, [[4 / 7, 3 / 7]])  # before, renormalised
    _, one = moe.top_k(logits, 1, "after")
    assert one[0, 0] == 1.0  # k = 1, softmax after top-k: the gate is always 1
    with pytest.raises(ArgumentError, match="order"):
        moe.top_k(logits, 2, "sideways")


def test_aux_loss_formula():
    e, t = 4, 8
    uniform = np.full((t, e), 1 / e)
    balanced = np.arange(t)[:, None] % e  # each expert chosen t/e times
    assert moe.aux_loss(uniform, balanced, weight=0.01) == pytest.approx(0.01)
    collapsed = np.zeros((t, 1), int)
    assert moe.aux_loss(np.eye(e)[collapsed[:, 0]], collapsed, 0.01) == pytest.approx(0.01 * e)
    # hand case: f = (3/4, 1/4, 0, 0), P = (0.5, 0.3, 0.1, 0.1): 0.01·4·(0.375 + 0.075)
    probs = np.array([[0.5, 0.3, 0.1, 0.1]] * 4)
    assert moe.aux_loss(probs, np.array([[0], [0], [0], [1]]), 0.01) == pytest.approx(0.018)


def test_route_and_skew():
    balanced = moe.route(moe.skewed_logits(4096, 16, 0.0), 2, 1.25, 8)
    skewed = moe.route(moe.skewed_logits(4096, 16, 2.0), 2, 1.25, 8)
    assert balanced.capacity == math.ceil(2 * 512 * 1.25 / 16)
    assert balanced.dropped < skewed.dropped
    assert moe.aux_loss(balanced.probs, balanced.experts) < moe.aux_loss(skewed.probs,
                                                                          skewed.experts)
    # drops: whatever exceeds groups·C per expert and group, counted from the keep loop
    loads = skewed.load()
    assert loads.sum() == 4096 * 2 and skewed.kept().max() <= 8 * skewed.capacity


def test_plan_shapes_and_bytes():
    p = moe.plan(64, 8, 2, 1.0, 8, hidden=16, ffn=32)
    assert (p.group_tokens, p.capacity, p.experts_per_device) == (8, 2, 1)
    assert p.shapes["w_in"] == (1, 16, 32) and p.shapes["dispatch"] == (8, 2, 16)
    assert p.expert_params_per_device == 2 * 16 * 32
    assert p.dispatch_bytes == 8 * 2 * 16 * 4
    assert [(c.kind, c.bytes) for c in p.collectives()] == [("all-to-all", 1024)] * 2
    assert len(p.collectives(training=True)) == 4
    assert p.tensor_parallel_collectives()[0].bytes == 64 * 16 * 4
    assert moe.plan(64, 8, 2, 1.0, 1).collectives() == []


# --- run and check: the contract -----------------------------------------------------------------

def planned_all_to_alls(found):
    return [(c.kind, c.bytes, c.group_size) for c in found if c.kind == "all-to-all"]


@pytest.mark.slow
def test_check_with_drops():
    result = moe.check(64, 8, 2, 1.0)
    assert result.capacity == 2  # ⌈2 · 8 · 1.0 / 8⌉ per group of 64 / 8 tokens
    assert result.output_error < 1e-5 and result.gradient_error < 1e-5
    params = moe.init(16, 32, 8, 0)
    x = np.random.default_rng(0).standard_normal((64, 16), dtype=np.float32)
    experts = moe.top_k(x @ params["router"], 2)[0]
    kept = np.concatenate([loop_keep(experts[8 * g:8 * g + 8], 8, 2) for g in range(8)])
    assert result.dropped == pytest.approx(1 - kept.mean()) and result.dropped > 0.1
    buffer = 8 * 2 * 16 * 4  # [E, C, H] float32
    assert planned_all_to_alls(result.collectives) == [("all-to-all", buffer, 8)] * 2
    assert planned_all_to_alls(result.train) == [("all-to-all", buffer, 8)] * 4
    assert all(c.kind in ("all-to-all", "all-reduce") for c in result.collectives)


@pytest.mark.slow
def test_check_without_drops_softmax_after():
    result = moe.check(32, 8, 2, 4.0, devices=4, order="after")
    assert result.capacity == 8 and result.dropped == 0.0  # C = S: nothing can overflow
    assert result.output_error < 1e-5 and result.gradient_error < 1e-5
    assert planned_all_to_alls(result.collectives) == [("all-to-all", 8 * 8 * 16 * 4, 4)] * 2


def test_check_errors():
    with pytest.raises(ShardingError, match="do not split over 8 devices"):
        moe.check(64, 4, 2, 1.0)
    with pytest.raises(ArgumentError, match="capacity_factor"):
        moe.check(64, 8, 2, 0)
    with pytest.raises(ShardingError, match="only 8 devices"):
        moe.check(64, 16, 2, 1.0, devices=16)


def test_drops_change_the_output():
    """The reference honours the drops: with a smaller capacity the output differs."""
    params = moe.init(16, 32, 8, 0)
    x = np.random.default_rng(0).standard_normal((64, 16), dtype=np.float32)
    y_small, _ = moe.reference(x, params, 2, 1.0, 8)
    y_big, _ = moe.reference(x, params, 2, 4.0, 8)
    assert not np.allclose(y_small, y_big)


def test_gshard_layer_on_one_device_equals_reference():
    params = moe.init(16, 32, 8, 1)
    x = np.random.default_rng(1).standard_normal((32, 16), dtype=np.float32)
    c = moe.capacity(8, 8, 2, 1.0)
    y, aux = moe.gshard_layer(x.reshape(4, 8, 16), params, 2, c)
    want_y, want_aux = moe.reference(x, params, 2, 1.0, 4)
    np.testing.assert_allclose(np.asarray(y).reshape(32, 16), want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(aux, want_aux, rtol=1e-5)


def test_gspmd_without_reshard_gathers_instead():
    mesh = tpviz.make_mesh((8,), ("expert",))
    params = moe.place(mesh, moe.init(16, 32, 8))
    x = np.random.default_rng(0).standard_normal((64, 16), dtype=np.float32)
    found = compiled.collectives(moe.gspmd_forward(mesh, 2, 2, reshard=False), x, params)
    assert found.kinds()["all-gather"] + found.kinds()["all-reduce"] >= 1
    hand = compiled.collectives(moe.forward(mesh, 2, 2), x, params)
    assert found.sent_bytes() > hand.sent_bytes()  # the compiler's road moves more bytes


# --- draw and explore ----------------------------------------------------------------------------

def test_figures():
    r = moe.route(moe.skewed_logits(32, 8, 1.0), 2, 1.0, 4)
    assert r.dropped > 0
    assert isinstance(moe.draw.routing(r, 4), Figure)
    assert isinstance(moe.draw.load(r, 4), Figure)


def test_collectives_across_nodes_are_priced_between_nodes():
    cluster = SYSTEMS["H100 cluster (NVLink + InfiniBand)"]  # 8 GPUs a node, NVLink 450 GB/s
    p8, p16 = (moe.plan(4096, 64, 2, 1.25, n, 4096, 14336, "bf16") for n in (8, 16))
    # by hand (core.hardware): each device's buffer b = [E, C, H]; inside one node it sends
    # (N-1)/N of b over NVLink in N-1 steps of 0.6 µs, after NCCL's base latency of 6.6 µs
    b = p8.dispatch_bytes
    one = 7 / 8 * b / 4.5e11 + 6.6e-6 + 7 * 0.6e-6
    assert p8.time(cluster).comm_s == pytest.approx(2 * one)
    # across 2 nodes each node sends half its 8b to the other through 8 NICs of 50 GB/s:
    # (M-1)/M² · 16b / 400e9 = b / 100e9; the NVLink part (7·b/256 at 450e9) is smaller
    b = p16.dispatch_bytes
    two = b / 1e11 + 6.6e-6 + 7 * 0.6e-6 + 2.7e-6
    assert p16.time(cluster).comm_s == pytest.approx(2 * two)
    # 2.6× the bandwidth term inside one node; the latency terms narrow it a little
    assert p16.time(cluster).comm_s > 2.4 * p16.time(SYSTEMS["H100 (NVLink)"]).comm_s
    html, _ = moe.render_moe(devices=16, system="H100 cluster (NVLink + InfiniBand)")
    assert "spans 2 nodes" in html and "node NICs" in html


def test_render_and_explore():
    html, fig = moe.render_moe(experts=64, top_k=2, capacity_factor=1.0, skew=2.0, devices=8)
    assert "capacity C" in html and isinstance(fig, Figure)
    with pytest.raises(ShardingError):
        moe.render_moe(experts=8, devices=16)
    assert isinstance(moe.explore_moe(), Live)


# --- exercises: the right answer passes, plausible wrong answers fail -----------------------------



def test_check_capacity(capsys):
    passes(ex.check_capacity, 138, capsys=capsys)
    fails(ex.check_capacity, 137, words="rounds down")
    fails(ex.check_capacity, 69, words="one choice per token")
    fails(ex.check_capacity, 125, words="capacity factor")
    fails(ex.check_capacity, 137.5, words="whole number")


def test_check_dropped(capsys):
    # DROP_CHOICES: expert loads 3, 7, 4, 2 against C = ⌈2·8/4⌉ = 4: 3 of 16 choices dropped
    assert np.bincount(ex.DROP_CHOICES.ravel(), minlength=4).tolist() == [3, 7, 4, 2]
    passes(ex.check_dropped, 3 / 16, capsys=capsys)
    fails(ex.check_dropped, 3, words="number of dropped choices")
    fails(ex.check_dropped, 3 / 8, words="divides by the tokens")
    fails(ex.check_dropped, 1 / 16, words="only the first choices")  # expert 1: 5 firsts
    fails(ex.check_dropped, 4 / 16, words="not right")  # the chapter's own example


def test_check_keep(capsys):
    passes(ex.check_keep, lambda e, n, c: loop_keep(e, n, c), capsys=capsys)
    fails(ex.check_keep, lambda e, n, c: loop_keep(e, n, c, choice_major=False),
          words="first choice .* before any second choice")
    fails(ex.check_keep, lambda e, n, c: loop_keep(e, n, c + 1), words="keeps 5 choices")
    fails(ex.check_keep, lambda e, n, c: np.ones(e.shape, bool), words="keeps")
    fails(ex.check_keep, lambda e, n, c: 1 / 0, words="raised ZeroDivisionError")


def test_check_aux_loss(capsys):
    def right(probs, experts, alpha):
        e = probs.shape[1]
        f = np.bincount(experts.ravel(), minlength=e) / experts.size
        return alpha * e * float(np.sum(f * probs.mean(0)))

    passes(ex.check_aux_loss, right, capsys=capsys)
    fails(ex.check_aux_loss, lambda p, x, a: right(p, x, a) / p.shape[1], words="E times")
    fails(ex.check_aux_loss, lambda p, x, a: right(p, x, a) * x.shape[1], words="k = 2 times")
    fails(ex.check_aux_loss,  # f from the first choices only
          lambda p, x, a: right(p, x[:, :1], a), words="not right")


def test_check_all_to_all_bytes(capsys):
    buffer = 64 * 160 * 4096 * 2
    passes(ex.check_all_to_all_bytes, buffer * 7 // 8, capsys=capsys)
    fails(ex.check_all_to_all_bytes, buffer, words="whole buffer")
    fails(ex.check_all_to_all_bytes, buffer * 7 // 4, words="4 bytes")
    fails(ex.check_all_to_all_bytes, 64 * 128 * 4096 * 2 * 7 // 8, words="capacity factor")


def _drops_by_loop(experts, cf, tokens=4096, devices=8, k=2):
    """Fraction of choices dropped for the design router: top-k by sorting each token's logits,
    then, group by group, first choices by position before second choices."""
    logits = np.random.default_rng(0).standard_normal((tokens, experts)) + 0.2 * np.linspace(
        1, -1, experts)
    group = tokens // devices
    c = math.ceil(round(k * group * cf / experts, 9))
    dropped = 0
    for g in range(devices):
        rows = logits[g * group:(g + 1) * group]
        choices = np.argsort(-rows, axis=1, kind="stable")[:, :k]
        used = np.zeros(experts, int)
        for j in range(k):
            for t in range(group):
                e = choices[t, j]
                if used[e] < c:
                    used[e] += 1
                else:
                    dropped += 1
    return dropped / (tokens * k)


def test_check_design(capsys):
    mib = 2**20  # by hand: E/8 experts of 2·H·F·2 bytes, 4 buffers of E·C·H·2 bytes
    assert ex.design_memory(224, 2.0) == 28 * 32 * mib + 4 * 224 * 10 * 4096 * 2  # C = 10
    assert ex.design_memory(232, 3.0) == 29 * 32 * mib + 4 * 232 * 14 * 4096 * 2 > 2**30
    best = ex._design_best()
    assert best == (224, 2.0)
    # the drops recomputed here, by GShard's rule in a plain loop (not the code under test)
    assert _drops_by_loop(224, 2.0) <= 0.01 < _drops_by_loop(224, 1.5)
    assert _drops_by_loop(232, 3.0) <= 0.01  # 232 fails on memory only
    passes(ex.check_design, *best, capsys=capsys)
    fails(ex.check_design, *ex._design_best(memory_only=True), words="drops")  # ignores drops
    fails(ex.check_design, *ex._design_best(drops_only=True), words="over the budget")
    fails(ex.check_design, 232, 3.0, words="over the budget")  # buffers count too
    # several pairs meet both limits: 192, 224 with cf 2 or 3, 208 with cf 3
    passes(ex.check_design, 224, 3.0, capsys=capsys)
    passes(ex.check_design, 192, 2.0, capsys=capsys)
    assert _drops_by_loop(208, 2.0) > 0.01 >= _drops_by_loop(208, 3.0)
    fails(ex.check_design, 208, 2.0, words="drops 1.3%")
    fails(ex.check_design, 128, 2.0, words="from 192 to 256")
    fails(ex.check_design, 100, 2.0, words="does not split")
    fails(ex.check_design, 224.0, 2.0, words="experts must be an integer")
    fails(ex.check_design, "224", 2.0, words="experts must be an integer")
