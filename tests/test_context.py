"""Context parallelism: the three schemes against full attention (forward and gradients, causal
and not), their compiled collectives against the plan, the causal imbalance from FLOPs."""

import jax.numpy as jnp
import numpy as np
import pytest

from tpviz import context
from tpviz.context import balance
from tpviz.errors import ArgumentError, CheckFailed, ShardingError


@pytest.mark.parametrize(("scheme", "causal"), [("sequence", False), ("sequence", True),
                                                ("ring", False), ("ring", True),
                                                ("ulysses", False), ("ulysses", True)])
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
