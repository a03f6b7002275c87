"""Context parallelism: the three schemes against full attention (forward and gradients, causal
and not), their compiled collectives against the plan, the causal imbalance from FLOPs."""

import jax.numpy as jnp
import numpy as np
import pytest

from tpviz import context
from tpviz.context import balance, compare
from tpviz.errors import ArgumentError, CheckFailed, ShardingError


@pytest.mark.parametrize(("scheme", "causal"), [("sequence", False), ("sequence", True),
                                                ("ring", False), ("ring", True),
                                                ("ulysses", False), ("ulysses", True)])
@pytest.mark.slow
def test_check_equals_full_attention_and_the_plan(scheme, causal):
    found = context.check(scheme, 32, 8, devices=4, causal=causal)
    assert found.forward_error < 1e-5 and found.gradient_error < 1e-5
    n, s, h = 4, 32, 8 * 8  # 8 heads of width 8, float32
    if scheme == "ring":  # N - 1 permutes of [2, S/N, H] forward, as many backward
        assert [(c.kind, c.bytes) for c in found] == [("collective-permute", 2 * s // n * h * 4)] * 3
        assert found.train.kinds() == {"collective-permute": 6}
    elif scheme == "ulysses":  # q, k, v to heads and the output back; transposes backward
        assert [(c.kind, c.bytes) for c in found] == [("all-to-all", s // n * h * 4)] * 4
        assert found.train.kinds() == {"all-to-all": 8}
    else:  # all-gather [S, H] and reduce-scatter to [S/N, H]; transposed backward
        assert sorted((c.kind, c.bytes) for c in found) == [("all-gather", s * h * 4),
                                                            ("reduce-scatter", s // n * h * 4)]
        assert found.train.kinds() == {"all-gather": 2, "reduce-scatter": 2}


@pytest.mark.slow
def test_ring_contiguous_causal_and_eight_devices():
    found = context.check("ring", 64, 2, devices=8, causal=True, layout="contiguous")
    assert found.layout == "contiguous" and len(found) == 7


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


def test_causal_imbalance_from_flops():
    contiguous = balance.flops_per_device(64, 2, 4, "contiguous")
    zigzag = balance.flops_per_device(64, 2, 4, "zigzag")
    work = context.causal_work(4, "contiguous")  # 4, 8, 12, 16 chunk pairs
    assert contiguous == sorted(contiguous)
    # the matmuls dominate: FLOPs grow as the blocks computed, 1 : 2 : 3 : 4
    assert np.allclose(np.asarray(contiguous) / contiguous[0], np.asarray(work) / work[0],
                       rtol=0.05)
    assert balance.imbalance(contiguous) > 1.5 and balance.imbalance(zigzag) < 1.05


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
    real = context.check.__globals__["plan"]
    monkeypatch.setitem(context.check.__globals__, "plan",
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


def _ring(q, k, v, separate=False, combine=True):
    n = jax.lax.axis_size("context")
    o, lse = context.block_attention(q, k, v)
    kv = jnp.stack([k, v])
    ring = [(i, (i + 1) % n) for i in range(n)]
    for _ in range(n - 1):
        if separate:
            kv = jnp.stack([jax.lax.ppermute(kv[0], "context", ring),
                            jax.lax.ppermute(kv[1], "context", ring)])
        else:
            kv = jax.lax.ppermute(kv, "context", ring)
        block = context.block_attention(q, kv[0], kv[1])
        o, lse = context.combine(o, lse, *block) if combine else block
    return o


@pytest.mark.slow
def test_check_ring_step(capsys):
    passes(exercises.check_ring_step, _ring, capsys=capsys)
    fails(exercises.check_ring_step, lambda q, k, v: _ring(q, k, v, combine=False),
          words="wrong values")
    fails(exercises.check_ring_step, lambda q, k, v: _ring(q, k, v, separate=True),
          words="separate permutes")

    def wasteful(q, k, v):  # attend, then pass on, N times: the last permute is wasted
        n = jax.lax.axis_size("context")
        kv, o, lse = jnp.stack([k, v]), None, None
        for _ in range(n):
            block = context.block_attention(q, kv[0], kv[1])
            o, lse = block if o is None else context.combine(o, lse, *block)
            kv = jax.lax.ppermute(kv, "context", [(i, (i + 1) % n) for i in range(n)])
        return o + 0 * kv[0]  # keep the last permute alive

    fails(exercises.check_ring_step, wasteful, words="runs 4 permutes")

    def gather(q, k, v):  # right values, but all-gathers the keys and values
        k, v = (jax.lax.all_gather(t, "context", axis=1, tiled=True) for t in (k, v))
        return context.block_attention(q, k, v)[0]

    fails(exercises.check_ring_step, gather, words="ppermute only")


def test_check_causal_imbalance(capsys):
    passes(exercises.check_causal_imbalance, 16 / 9, capsys=capsys)
    fails(exercises.check_causal_imbalance, 8, words="least busy")
    fails(exercises.check_causal_imbalance, 2, words="halved")
    fails(exercises.check_causal_imbalance, 1.5, words="not right")


def test_check_context_design(capsys):
    d = exercises.check_context_design.__wrapped__.__globals__["DESIGN"]
    args = (d["sequence"], d["heads"], d["hidden"], d["devices"])
    gib = context.compare.memory("ring", *args) / 2**30
    passes(exercises.check_context_design, "ring", "zigzag", gib, capsys=capsys)
    fails(exercises.check_context_design, "ring", "contiguous", gib, words="2N/")
    fails(exercises.check_context_design, "ulysses", "contiguous",
          context.compare.memory("ulysses", *args) / 2**30, words="over the budget")
    fails(exercises.check_context_design, "ring", "zigzag", gib * 2, words="not")
    fails(exercises.check_context_design, "rings", "zigzag", gib, words="choose")


def test_explorer_and_figures():
    from matplotlib.figure import Figure

    from tpviz.core.widgets import Live

    table, fig = context.render_context(sequence=65536, devices=16, heads=8, scheme="ulysses")
    assert isinstance(fig, Figure) and "heads = 8 do not split over devices = 16" in table
    assert isinstance(context.explore_context(), Live)
    assert isinstance(context.draw.balance({"contiguous": [1, 2], "zigzag": [2, 2]}), Figure)


def test_ring_hides_its_permutes_from_the_threshold():
    """A permute of 2·(S/N)·H·b bytes hides behind 4·(S/N)²·H FLOPs from S/N = R·b/(2W)."""
    c = compare.hiding_block(4096, "H100 (NVLink)")
    assert c == pytest.approx(989e12 * 2 / (2 * 450e9))
    below = compare.layer("ring", 8 * 1024, 32, 4096, 8)  # S/N = 1,024 < c
    above = compare.layer("ring", 8 * 8192, 32, 4096, 8)  # S/N = 8,192 > c
    assert below.exposed_s > 0 and above.exposed_s == 0
    uly = compare.layer("ulysses", 8 * 8192, 32, 4096, 8)
    assert uly.sent_bytes * 8 / 2 == above.sent_bytes  # Ulysses: N/2 times fewer bytes


@pytest.mark.slow
def test_memory_formula_beside_the_compiled_temporaries():
    for scheme in context.SCHEMES:
        measured = context.temporaries(scheme, 512, 8, devices=8)
        assert 0.7 < measured / compare.memory(scheme, 512, 8, 64, 8, dtype="float32") < 1.3
