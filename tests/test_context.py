"""Context parallelism: the three schemes against full attention (forward and gradients, causal
and not), their compiled collectives against the plan, the causal imbalance from FLOPs."""

import inspect

import jax.numpy as jnp
import numpy as np
import pytest

from tpviz import context
from tpviz.context import balance, compare
from tpviz.errors import ArgumentError, CheckFailed, ShardingError


@pytest.mark.parametrize(("scheme", "causal"), [("sequence", False), ("sequence", True),
                                                ("ring", False), ("ring", True),
                                                ("ulysses", False), ("ulysses", True),
                                                ("allgather", False), ("allgather", True),
                                                ("usp", False), ("usp", True)])
@pytest.mark.slow
def test_check_equals_full_attention_and_the_plan(scheme, causal):
    found = context.check(scheme, 32, 8, devices=4, causal=causal,
                          **({"ulysses": 2} if scheme == "usp" else {}))
    assert found.forward_error < 1e-5 and found.gradient_error < 1e-5
    n, s, h = 4, 32, 8 * 8  # 8 heads of width 8, float32
    if scheme == "ring":  # N - 1 permutes of [2, S/N, H] forward; backward (Liu et al.): the
        # blocks again, N - 1, and their gradients, N (the last one home)
        assert [(c.kind, c.bytes) for c in found] == [("collective-permute", 2 * s // n * h * 4)] * 3
        assert found.train.kinds() == {"collective-permute": 3 + 3 + 4}
    elif scheme == "ulysses":  # q, k, v to heads and the output back; transposes backward
        assert [(c.kind, c.bytes) for c in found] == [("all-to-all", s // n * h * 4)] * 4
        assert found.train.kinds() == {"all-to-all": 8}
    elif scheme == "allgather":  # K and V gathered [2, S, H]; dK, dV reduce-scattered back
        assert [(c.kind, c.bytes) for c in found] == [("all-gather", 2 * s * h * 4)]
        assert found.train.kinds() == {"all-gather": 1, "reduce-scatter": 1}
    elif scheme == "usp":  # Ulysses over u = 2: all-to-alls of [S/N, H]; a ring of r = 2 over
        # [2, S/r, H/u] blocks: 1 permute forward, 1 + 2 backward
        assert sorted((c.kind, c.bytes, c.group_size) for c in found) == (
            [("all-to-all", s // n * h * 4, 2)] * 4 + [("collective-permute", 2 * s * h * 4 // 4, 4)])
        assert found.train.kinds() == {"all-to-all": 8, "collective-permute": 4}
    else:  # all-gather [S, H] and reduce-scatter to [S/N, H]; transposed backward
        assert sorted((c.kind, c.bytes) for c in found) == [("all-gather", s * h * 4),
                                                            ("reduce-scatter", s // n * h * 4)]
        assert found.train.kinds() == {"all-gather": 2, "reduce-scatter": 2}


@pytest.mark.slow
def test_ring_contiguous_causal_and_eight_devices():
    found = context.check("ring", 64, 2, devices=8, causal=True, layout="contiguous")
    assert found.layout == "contiguous" and len(found) == 7


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["striped", "zigzag"])
def test_balanced_layouts_equal_full_attention_over_seeds(layout):
    found = context.check("ring", 64, 2, devices=4, causal=True, layout=layout, seeds=3)
    assert len(found.errors) == 3 and found.gradient_error < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["ring", "ulysses", "allgather", "sequence", "usp"])
def test_grouped_query_attention_on_the_mesh(scheme):
    """n_kv = 2 key/value heads for 8 query heads: the blocks that travel are g = 1/4 as wide."""
    found = context.check(scheme, 32, 8, devices=2 if scheme != "usp" else 4, causal=True,
                          kv_heads=2, **({"ulysses": 2} if scheme == "usp" else {}))
    assert found.gradient_error < 1e-5
    if scheme == "ring":  # [2, S/N, n_kv, d_h] float32, N = 2
        assert [c.bytes for c in found] == [2 * 16 * 2 * 8 * 4]


def test_sequence_parallel_sends_what_the_all_reduce_sends():
    """Korthikanti et al.: all-gather + reduce-scatter move the bytes of one all-reduce."""
    from tpviz import megatron

    sp = context.plan("sequence", 2048, 16, 1024, 8, dtype="bf16")
    tp = megatron.plan(2048, 1024, 4096, 16, 8).collectives()[:1]
    assert sp.sent_bytes() == tp[0].sent_bytes


def test_plan_bytes_from_the_formulas():
    s, a, h, n, b = 4096, 32, 4096, 8, 2
    ring = context.plan("ring", s, a, h, n, dtype="bf16")
    uly = context.plan("ulysses", s, a, h, n, dtype="bf16")
    assert ring.sent_bytes() == (n - 1) * 2 * s // n * h * b
    assert uly.sent_bytes() == 4 * (n - 1) / n * s // n * h * b
    assert context.plan("ring", s, a, h, 1) == []
    gathered = context.plan("allgather", s, a, h, n, dtype="bf16")  # Llama 3: the ring's bytes
    assert gathered.sent_bytes() == ring.sent_bytes()
    assert context.plan("ring", s, a, h, n, kv_heads=a, dtype="bf16") == ring  # n_kv = n_h


@pytest.mark.parametrize(("heads", "kv_heads", "devices"), [(64, 8, 8), (32, 32, 8), (32, 8, 4),
                                                           (16, 4, 16)])
def test_ulysses_against_the_ring_with_grouped_query_attention(heads, kv_heads, devices):
    """Ring: (N-1)·2g·(S/N)·H·b; Ulysses: (N-1)/N·(S/N)·H·b·(2 + 2g): the ratio is gN/(1 + g),
    N/2 without GQA and 8/9 at g = 1/8, N = 8 (Ulysses then sends more), in the forward pass;
    over both passes (3N - 2)gN/(2(N - 1)(1 + g)): 1.4 at g = 1/8, N = 8."""
    s, h, g, n = 8192, heads * 128, kv_heads / heads, devices
    if heads % n or kv_heads % n:
        with pytest.raises(ShardingError, match="do not split"):
            context.plan("ulysses", s, heads, h, n, kv_heads=kv_heads)
        return
    ring = context.plan("ring", s, heads, h, n, kv_heads=kv_heads).sent_bytes()
    uly = context.plan("ulysses", s, heads, h, n, kv_heads=kv_heads).sent_bytes()
    assert ring / uly == pytest.approx(g * n / (1 + g))
    assert ring == pytest.approx((n - 1) * 2 * g * s / n * h * 4)
    # forward and backward: the ring's 3N - 2 permutes (Liu et al.) against 8 all-to-alls
    both = {scheme: context.plan(scheme, s, heads, h, n, kv_heads=kv_heads,
                                 training=True).sent_bytes() for scheme in ("ring", "ulysses")}
    assert both["ring"] / both["ulysses"] == pytest.approx(
        (3 * n - 2) * g * n / (2 * (n - 1) * (1 + g)))


def test_ring_backward_sends_twice_the_forward():
    """Liu et al.'s backward: the blocks again (N - 1) and their gradients (N); autodiff's,
    having kept every block: the gradients only (N - 1)."""
    n = 8
    forward = context.plan("ring", 1024, 8, 512, n).sent_bytes()
    train = context.plan("ring", 1024, 8, 512, n, training=True).sent_bytes()
    kept = context.plan("ring", 1024, 8, 512, n, training=True, recompute=False).sent_bytes()
    assert (train - forward) / forward == pytest.approx((2 * n - 1) / (n - 1))
    assert kept == 2 * forward
    regather = context.plan("sequence", 1024, 8, 512, n, training=True, regather=True)
    assert regather.kinds() == {"all-gather": 3, "reduce-scatter": 2}


@pytest.mark.slow
def test_combine_is_attention_over_both_blocks():
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 6, 2, 4)), jnp.float32) for _ in range(3))
    whole = context.attention(q, k, v)
    halves = context.combine(*context.block_attention(q, k[:, :2], v[:, :2]),
                             *context.block_attention(q, k[:, 2:], v[:, 2:]))[0]
    np.testing.assert_allclose(halves, whole, rtol=1e-5, atol=1e-6)


def test_zigzag_order_balances_the_chunks():
    order = context.zigzag_order(16, 4).reshape(4, 4)  # 8 chunks of 2
    assert order[0].tolist() == [0, 1, 14, 15] and order[3].tolist() == [6, 7, 8, 9]
    assert sorted(order.ravel().tolist()) == list(range(16))


def test_striped_order_is_token_t_on_device_t_mod_n():
    order = context.striped_order(16, 4).reshape(4, 4)
    for device in range(4):
        assert order[device].tolist() == [t for t in range(16) if t % 4 == device]
    assert not np.array_equal(order.ravel(), context.zigzag_order(16, 4))


def test_causal_imbalance_from_flops():
    contiguous = balance.flops_per_device(64, 2, 4, "contiguous")
    zigzag = balance.flops_per_device(64, 2, 4, "zigzag")
    striped = balance.flops_per_device(64, 2, 4, "striped")
    work = context.causal_work(4, "contiguous", tiles=2)  # 3, 7, 11, 15 quarter blocks
    assert contiguous == sorted(contiguous)
    # the matmuls dominate: FLOPs grow as the tiles computed
    assert np.allclose(np.asarray(contiguous) / contiguous[0], np.asarray(work) / work[0],
                       rtol=0.05)
    assert balance.imbalance(contiguous) > 1.5 and balance.imbalance(zigzag) < 1.05
    assert balance.imbalance(striped) < 1.05
    # two tiles per block: striped 3N quarter blocks against zigzag's 2N + 1 (12 against 9)
    assert np.mean(striped) / np.mean(zigzag) == pytest.approx(12 / 9, rel=0.05)


def _tiles_by_mask(layout: str, n: int, t: int, c: int = 12) -> list[int]:
    """Tiles with at least one visible (query, key) pair, counted from the causal mask."""
    def where(i):  # the positions device i holds
        if layout == "striped":
            return i + n * np.arange(c)
        if layout == "zigzag":
            h = c // 2
            return np.concatenate([i * h + np.arange(h), (2 * n - 1 - i) * h + np.arange(h)])
        return i * c + np.arange(c)

    w, counts = c // t, []
    for me in range(n):
        mask = [where(j)[None, :] <= where(me)[:, None] for j in range(n)]
        counts.append(sum(m[a * w:(a + 1) * w, b * w:(b + 1) * w].any()
                          for m in mask for a in range(t) for b in range(t)))
    return counts


@pytest.mark.parametrize("n", [2, 3, 8])
@pytest.mark.parametrize("t", [1, 2, 4, 6])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "striped"])
def test_causal_work_counts_the_tiles_the_mask_leaves(layout, t, n):
    assert context.causal_work(n, layout, tiles=t) == _tiles_by_mask(layout, n, t)


def test_causal_work_whole_blocks_and_odd_zigzag_tiles():
    assert context.causal_work(8, "contiguous") == list(range(1, 9))  # blocks 0 ... i
    assert context.causal_work(8, "zigzag") == context.causal_work(8, "striped") == [8] * 8
    with pytest.raises(ArgumentError, match="tiles = 3 is odd"):
        context.causal_work(8, "zigzag", tiles=3)


@pytest.mark.parametrize(("args", "error", "words"), [
    (("ulysses", 64, 4, 8), ShardingError, "heads = 4 do not split over devices = 8"),
    (("sequence", 64, 6, 4), ShardingError, "heads = 6"),
    (("ring", 60, 8, 8), ShardingError, "sequence = 60"),
    (("rings", 64, 8, 8), ArgumentError, "Did you mean 'ring'"),
])
def test_errors(args, error, words):
    with pytest.raises(error, match=words):
        context.check(*args)


def test_plan_errors():
    with pytest.raises(ShardingError, match="hidden = 30"):
        context.plan("ring", 64, 4, 30, 8)


@pytest.mark.slow
def test_check_catches_a_wrong_plan(monkeypatch):
    """The check compares with the plan: a plan with one permute too few fails."""
    space = inspect.unwrap(context.check).__globals__  # the module's, not the checks' wrapper's
    real = space["plan"]
    monkeypatch.setitem(space, "plan",
                        lambda *a, **k: type(real(*a, **k))(real(*a, **k)[1:]))
    with pytest.raises(CheckFailed, match="collectives"):
        context.check("ring", 32, 2, devices=4)


def test_together_chooses_context_parallelism_for_long_sequences():
    import dataclasses

    from tpviz.together import MODELS, best, plan

    long = dataclasses.replace(MODELS["GPT-3 6.7B"], name="6.7B, 64k tokens", seq=65536,
                               batch=64)
    without = best(long, "H100 80GB", 64)
    chosen = best(long, "H100 80GB", 64, context=(1, 2, 4, 8))
    assert chosen.context > 1 and chosen.devices == 64 and chosen.fits
    assert chosen.step_s < without.step_s
    assert "context" in chosen.collectives and chosen.mfu < 0.7  # at most the efficiency
    # c splits the sequence: a layer's activations on s/c tokens, the compute by c
    one = plan(long, "H100 80GB", 1, 1, 64, recompute="full")
    eight = plan(long, "H100 80GB", 1, 1, 8, recompute="full", context=8)
    assert eight.memory["activations"] == pytest.approx(one.memory["activations"] / 8)
    assert eight.compute_s == pytest.approx(one.compute_s)  # 8x the microbatches, 1/8 the work
    short = best(MODELS["GPT-3 6.7B"], "H100 80GB", 64, context=(1, 2, 4, 8))
    assert short.context == 1  # at 2,048 tokens the sequence is not worth splitting


def test_together_counts_every_blocks_scores_and_the_backward_ring():
    """Without recomputation a CP device keeps its s/c queries' scores against all s keys:
    Korthikanti's sbh·34 + 5·a·s·S·b with s = S/c (not 5·a·s²·b). Ring permutes per layer:
    c - 1 per forward pass; backward c - 1 (scores kept) or 2c - 1 (recomputed: Liu et al.)."""
    import dataclasses

    from tpviz.together import MODELS, plan

    S, c = 8192, 4
    model = dataclasses.replace(MODELS["GPT-3 6.7B"], seq=S, batch=8)
    a, h, L, s = model.heads, model.hidden, model.layers, S // c
    none = plan(model, "H100 80GB", 1, 1, 2, recompute="none", context=c)
    assert none.memory["activations"] == pytest.approx(L * (34 * s * h + 5 * a * s * S))
    for recompute, per_layer in (("none", 2 * (c - 1)), ("selective", (c - 1) + (2 * c - 1)),
                                 ("full", 2 * (c - 1) + (2 * c - 1))):
        found = plan(model, "H100 80GB", 1, 1, 2, recompute=recompute, context=c)
        assert len(found.collectives["context"]) == L * per_layer


# --- exercises: each checker against the solution and wrong answers ---------------------------

import jax  # noqa: E402
from checking import fails, passes  # noqa: E402

from tpviz import exercises  # noqa: E402


def test_check_ring_attention_bytes(capsys):
    right = 7 * 2 * 4096 * 4096 * 2
    passes(exercises.check_ring_attention_bytes, right, capsys=capsys)
    fails(exercises.check_ring_attention_bytes, right // 2, words="only the keys")
    fails(exercises.check_ring_attention_bytes, right * 8 // 7, words="N permutes")
    fails(exercises.check_ring_attention_bytes, right * 2, words="4 bytes")


def test_check_ulysses_ratio(capsys):
    passes(exercises.check_ulysses_ratio, 8, capsys=capsys)
    fails(exercises.check_ulysses_ratio, 1 / 8, words="the ring against Ulysses")
    fails(exercises.check_ulysses_ratio, 16, words="how many arrays")


def _combine(o1, lse1, o2, lse2):
    lse = jnp.logaddexp(lse1, lse2)
    return o1 * jnp.exp(lse1 - lse)[..., None] + o2 * jnp.exp(lse2 - lse)[..., None], lse


@pytest.mark.slow
def test_check_online_combine(capsys):
    passes(exercises.check_online_combine, _combine, capsys=capsys)
    fails(exercises.check_online_combine,
          lambda o1, l1, o2, l2: ((o1 + o2) / 2, jnp.logaddexp(l1, l2)), words="averages")
    fails(exercises.check_online_combine,  # a max instead of the log-sum-exp
          lambda o1, l1, o2, l2: (_combine(o1, l1, o2, l2)[0], jnp.maximum(l1, l2)),
          words="lse")
    fails(exercises.check_online_combine,  # the weights not normalised
          lambda o1, l1, o2, l2: (o1 * jnp.exp(l1)[..., None] + o2 * jnp.exp(l2)[..., None],
                                  jnp.logaddexp(l1, l2)), words="wrong values")
    fails(exercises.check_online_combine, lambda *a: a[0], words="two arrays")
    # the naive formula: right for ordinary scores, inf or NaN once e^lse leaves float32
    fails(exercises.check_online_combine,
          lambda o1, l1, o2, l2: _naive(o1, l1, o2, l2), words="inf or NaN")
    fails(exercises.check_online_combine, context.combine,
          words=r"write what `tpviz\.context\.ring\.combine`")


def _naive(o1, lse1, o2, lse2):
    lse = jnp.log(jnp.exp(lse1) + jnp.exp(lse2))
    return (o1 * (jnp.exp(lse1) / jnp.exp(lse))[..., None]
            + o2 * (jnp.exp(lse2) / jnp.exp(lse))[..., None], lse)


def test_check_causal_imbalance(capsys):
    # N = 16: device i attends to i + 1 blocks; the busiest 16 over the mean 8.5
    passes(exercises.check_causal_imbalance, 32 / 17, capsys=capsys)
    fails(exercises.check_causal_imbalance, 16 / 9, words="N = 8")  # the chapter's
    fails(exercises.check_causal_imbalance, 16, words="least busy")
    fails(exercises.check_causal_imbalance, 2, words="halved")
    fails(exercises.check_causal_imbalance, 1.5, words="not right")


def test_check_context_design(capsys):
    d = exercises.check_context_design.__wrapped__.__globals__["DESIGN"]
    args = (d["sequence"], d["heads"], d["hidden"], d["devices"])

    def gib(scheme):
        return context.compare.memory(scheme, *args) / 2**30

    # several answers: the ring balanced either way, Ulysses, and usp balanced
    passes(exercises.check_context_design, "ring", "zigzag", gib("ring"), capsys=capsys)
    passes(exercises.check_context_design, "ring", "striped", gib("ring"), capsys=capsys)
    passes(exercises.check_context_design, "ulysses", "contiguous", gib("ulysses"),
           capsys=capsys)
    passes(exercises.check_context_design, "usp", "zigzag", gib("usp"), capsys=capsys)
    fails(exercises.check_context_design, "ring", "contiguous", gib("ring"), words="2N/")
    fails(exercises.check_context_design, "ulysses", "zigzag", gib("ulysses"), words="plain")
    fails(exercises.check_context_design, "allgather", "contiguous", gib("allgather"),
          words="over the budget")
    fails(exercises.check_context_design, "sequence", "contiguous", gib("sequence"),
          words="over the budget|over 4 ms")
    fails(exercises.check_context_design, "ring", "zigzag", gib("ring") * 2, words="not")
    fails(exercises.check_context_design, "rings", "zigzag", gib("ring"), words="choose")


def test_explorer_and_figures():
    from matplotlib.figure import Figure

    from tpviz.core.widgets import Live

    table, fig = context.render_context(sequence=65536, devices=16, heads=8, scheme="ulysses")
    assert isinstance(fig, Figure) and "heads = 8 do not split over devices = 16" in table
    assert isinstance(context.explore_context(), Live)
    assert isinstance(context.draw.balance({"contiguous": [1, 2], "zigzag": [2, 2]}), Figure)


def test_ring_hides_its_permutes_from_the_threshold():
    """A permute of 2·(S/N)·H·b bytes hides behind 4·(S/N)²·H FLOPs from S/N = R·b/(2W), W the
    bandwidth of one permute: NVLink's 450 GB/s (H100), one ICI link one way on a TPU
    (9e10 B/s on v5p, austin2025scaling), whatever the devices around the ring."""
    c = compare.hiding_block(4096, "H100 (NVLink)")
    assert c == pytest.approx(989e12 * 2 / (2 * 450e9))
    v5p = compare.hiding_block(4096, "TPU v5p (ICI)", devices=16)
    assert v5p == pytest.approx(459e12 * 2 / (2 * 9e10))  # about 5,100, not 2,550
    below = compare.layer("ring", 8 * 1024, 32, 4096, 8)  # S/N = 1,024 < c
    above = compare.layer("ring", 8 * 8192, 32, 4096, 8)  # S/N = 8,192 > c
    assert below.exposed_s > 0 and above.exposed_s == 0
    for scale, hidden in ((0.8, False), (1.2, True)):  # layer() agrees with the threshold
        tokens = int(v5p * scale) // 16 * 16
        tpu = compare.layer("ring", 16 * tokens, 32, 4096, 16, "TPU v5p (ICI)")
        assert (tpu.exposed_s == 0) == hidden
    uly = compare.layer("ulysses", 8 * 8192, 32, 4096, 8)
    assert uly.sent_bytes * 8 / 2 == above.sent_bytes  # Ulysses: N/2 times fewer bytes
    gqa = compare.hiding_block(4096, "H100 (NVLink)", heads=32, kv_heads=8)  # g = 1/4
    assert gqa == pytest.approx(c / 4)


def test_usp_prices_its_ring_across_nodes_and_its_all_to_alls_inside():
    """64 GPUs in nodes of 8, 32 heads: Ulysses cannot use 64 devices, the ring can, and usp runs
    Ulysses over the 8 GPUs of a node and a ring of 8 across the nodes."""
    from tpviz.errors import ShardingError

    cluster = "H100 cluster (NVLink + InfiniBand)"
    with pytest.raises(ShardingError):
        compare.layer("ulysses", 131072, 32, 4096, 64, cluster)
    usp = compare.layer("usp", 131072, 32, 4096, 64, cluster, causal=True)
    ring = compare.layer("ring", 131072, 32, 4096, 64, cluster, causal=True)
    assert usp.ulysses == 8
    n, u, r, s, h, b = 64, 8, 8, 131072, 4096, 2
    assert usp.sent_bytes == pytest.approx(4 * (u - 1) / u * s / n * h * b
                                           + (r - 1) * 2 * (s / r) * (h / u) * b)
    assert usp.sent_bytes < ring.sent_bytes and usp.memory > ring.memory


def test_usp_with_one_axis_of_one_is_the_other_scheme():
    """usp with u = N is Ulysses (no ring) and with u = 1 the ring (no all-to-all): the same
    bytes and the same activations."""
    args = (8192, 32, 4096, 8)
    for u, other in ((8, "ulysses"), (1, "ring")):
        usp, alone = compare.layer("usp", *args, ulysses=u), compare.layer(other, *args)
        assert usp.sent_bytes == alone.sent_bytes and usp.memory == alone.memory
    between = compare.memory("usp", *args, ulysses=2)
    assert compare.memory("ring", *args) < between < compare.memory("ulysses", *args)


@pytest.mark.slow
def test_memory_formula_beside_the_compiled_temporaries():
    for scheme in context.SCHEMES:
        extra = {"ulysses": 2} if scheme == "usp" else {}
        measured = context.temporaries(scheme, 512, 8, devices=8, **extra)
        assert 0.7 < measured / compare.memory(scheme, 512, 8, 64, 8, dtype="float32",
                                               **extra) < 1.3


@pytest.mark.slow
def test_ring_backward_recomputes_instead_of_keeping_every_block():
    """Liu et al.'s backward keeps q, k, v, the output and the log-sum-exp: 4·(S/N)·H + (S/N)·n_h
    values per device, less than one block of scores; autodiff's keeps every block's
    probabilities, at least (N - 1)·n_h·(S/N)² values."""
    from tpviz.context.check import training_memory

    s, a, n = 512, 8, 8
    c, h = s // n, a * 8
    liu = training_memory("ring", s, a, n, fused=True)
    kept = training_memory("ring", s, a, n, recompute=False, fused=True)
    assert liu.saved == 4 * (4 * c * h + c * a)
    assert kept.saved > 4 * (n - 1) * a * c * c
    assert liu.fused.temp < kept.fused.temp


@pytest.mark.slow
def test_megatron_regathers_what_autodiff_keeps_whole():
    """Stored gathered, the backward keeps [B, S, H]; regathered (Megatron), [B, S/N, H] and one
    more all-gather: (N - 1)/N · B·S·H·b bytes less kept."""
    from tpviz.context.check import training_memory

    s, a, n = 256, 8, 8
    kept = training_memory("sequence", s, a, n)
    again = training_memory("sequence", s, a, n, regather=True)
    assert kept.saved - again.saved == (n - 1) * s * a * 8 * 4 // n
    found = context.check("sequence", 64, 8, devices=4, regather=True)
    assert found.train.kinds() == {"all-gather": 3, "reduce-scatter": 2}


@pytest.mark.slow
def test_the_ring_permutes_beside_the_attention_in_the_compiled_loop():
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from tpviz.context.check import inputs, mesh_of, split
    from tpviz.context.loops import overlap
    from tpviz.context.run import place
    from tpviz.core import compiled

    mesh, seq = mesh_of(4), P(None, "context")
    args = [place(mesh, t, seq) for t in inputs("ring", 32, 2)]
    fn = context.program("ring", mesh, causal=True, layout="zigzag")
    (found,) = overlap(compiled.compile_for(fn, *args))
    assert found.independent and found.permutes == 1 and found.fed == 0
    (back,) = overlap(split(fn, *args)[1])  # the next block, and the last trip's dK and dV
    assert back.independent and back.permutes == 2 and back.waiting == back.fed == 0

    def serial(q, k, v):  # permute, then attend what arrived: the attention waits
        def trip(carry, _):
            kv, o, lse = carry
            kv = jax.lax.ppermute(kv, "context", [(i, (i + 1) % 4) for i in range(4)])
            o, lse = context.combine(o, lse, *context.block_attention(q, kv[0], kv[1]))
            return (kv, o, lse), None

        own = context.block_attention(q, k, v)
        return jax.lax.scan(trip, (jnp.stack([k, v]), *own), None, length=3)[0][1]

    program = jax.shard_map(serial, mesh=mesh, in_specs=(seq,) * 3, out_specs=seq)
    (waits,) = overlap(compiled.compile_for(program, *args))
    assert waits.waiting > 0 and not waits.independent

    def sends_late(q, k, v):  # attend, then send what it computed: the permute waits
        def trip(o, _):
            o = context.block_attention(o, k, v)[0]  # the queries change every trip
            return jax.lax.ppermute(o, "context", [(i, (i + 1) % 4) for i in range(4)]), None

        return jax.lax.scan(trip, q, None, length=3)[0]

    program = jax.shard_map(sends_late, mesh=mesh, in_specs=(seq,) * 3, out_specs=seq)
    (fed,) = overlap(compiled.compile_for(program, *args))
    assert fed.fed == 1 and fed.waiting == 0 and not fed.independent
