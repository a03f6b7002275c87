"""Inference: the KV cache and decode/prefill pricing against the Scaling Book's and the papers'
numbers, the sharded decode steps against one device and the plan, the paged cache and
speculative decoding against their formulas."""

import dataclasses
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tpviz import inference
from tpviz.core import hardware as hw
from tpviz.errors import ArgumentError, CheckFailed, ShardingError
from tpviz.inference import model as tiny
from tpviz.inference import paged, serve, shards

LLAMA = hw.MODELS["LLaMA-3 70B"]


# --- the KV cache and the roofline, against published numbers -------------------------------

def test_kv_cache_per_token_is_the_scaling_books():
    # "2 * K * H * L = 2 * 8 * 128 * 80 = 160kB" per token in int8 (Serving LLaMA); bf16: twice
    assert inference.kv_cache_bytes(LLAMA, 1, "int8") == 2 * 8 * 128 * 80
    assert inference.kv_cache_bytes("LLaMA-3 70B", 1) == 2 * 2 * 8 * 128 * 80
    assert inference.kv_cache_bytes(LLAMA, 1, "int4") == 2 * 8 * 128 * 80 / 2
    # LLaMA-2 13B (40 layers, 40 heads of 128, no GQA): "6.7GB" for one 8,192-token sequence
    l2 = hw.Model("LLaMA-2 13B", 40, 5120, 40, ffn=13824, vocab=32000, gated=True, bias=False)
    assert round(inference.kv_cache_bytes(l2, 8192) / 1e9, 1) == 6.7


def test_multi_query_and_grouped_attention_divide_the_cache():
    mha = dataclasses.replace(LLAMA, kv_heads=64)
    mqa = dataclasses.replace(LLAMA, kv_heads=1)
    per = inference.kv_cache_bytes
    assert per(mha, 100) == 8 * per(LLAMA, 100) == 64 * per(mqa, 100)


def test_critical_batch_is_240_on_v5e_and_half_with_int8_weights():
    # the Scaling Book: B_crit = 240 in bf16 on v5e, 120 with int8 weights and bf16 FLOPs, back
    # to 240 with int8 FLOPs too
    bf16 = inference.critical_batch("TPU v5e")
    assert 240 <= bf16 <= 245
    assert inference.critical_batch("TPU v5e", "int8") == bf16 / 2
    assert inference.critical_batch("TPU v5e", "int8", "int8") == bf16


def test_decode_matmuls_turn_compute_bound_at_the_critical_batch():
    crit = inference.critical_batch("TPU v5e")

    def bound(b):
        return inference.decode(LLAMA, "TPU v5e", 16, b, 0).matmul.bound

    assert bound(math.floor(crit)) == "memory" and bound(math.ceil(crit)) == "compute"


def test_decode_attention_intensity_is_two_query_heads_per_kv_head_per_value():
    step = inference.decode(LLAMA, "TPU v5e", 16, 512, 4096)
    assert step.attention.intensity == pytest.approx(2 * 64 / 8 / 2)
    assert step.attention.bound == "memory"


def test_the_scaling_books_step_time_and_smallest_slices():
    # int8 weights and cache, B = 32, S = 8,192 on a v5e 4x2: "112e9 / (8 * 8.1e11) = 17ms"
    step = inference.decode(LLAMA, "TPU v5e", 8, 32, 8192, "int8")
    assert step.memory_s == pytest.approx(112e9 / (8 * 8.1e11), rel=0.02)
    # plus 2 all-reduces of x[32, 8192] in bf16 per layer (the matmuls stay memory-bound):
    # ~20.1 ms and ~199 tokens/s per chip where the book's HBM-only count gives 17 ms and 235
    one = inference.network("TPU v5e", 8).price("all-reduce", 32 * LLAMA.hidden * 2)
    assert step.seconds == pytest.approx(step.memory_s + 2 * LLAMA.layers * one.seconds)
    assert step.per_chip == pytest.approx(32 / 8 / step.seconds)
    assert 0.8 < step.per_chip / 235 < 0.9  # the all-reduces cost 10-20 % of the tokens
    # the smallest v5e slices: 4x4 in bf16, 4x2 in int8, 2x2 in int4
    assert [inference.min_chips(LLAMA, "TPU v5e", d) for d in ("bf16", "int8", "int4")] == \
        [16, 8, 4]
    # "remaining HBM for KV caches ... num KV caches @ 8k": 43 in bf16 on the 4x4, from 70e9
    # parameters; the model's 70.55e9 and room for the next token leave 42
    hbm = hw.chip_of("TPU v5e").hbm_bytes
    per_token = 2 * 2 * 8 * 128 * 80  # bf16
    assert (16 * hbm - 2 * 70e9) // (per_token * 8192) == 43
    assert (16 * hbm - 2 * LLAMA.params) // (per_token * 8193) == 42
    assert inference.max_batch(LLAMA, "TPU v5e", 16, 8192) == 42


def test_prefill_is_compute_bound_and_near_the_scaling_books_time():
    # "2 * 70e9 * 8192 / (16 * 1.97e14 * 0.4) = 0.91s" (40% of peak); we count attention too
    step = inference.prefill(LLAMA, "TPU v5e", 16, 8192)
    assert step.matmul.bound == "compute"
    assert step.compute_s / 0.4 == pytest.approx(0.91, rel=0.1)
    assert step.compute_s / 0.4 > 2 * 70e9 * 8192 / (16 * 1.97e14 * 0.4)


def test_palm_540b_is_below_its_measured_29_ms():
    palm = inference.PALM_540B
    assert palm.params == pytest.approx(540.35e9, rel=1e-4)  # Chowdhery et al., Table 1
    assert inference.kv_cache_bytes(palm, 1) == 2 * 118 * 1 * 256 * 2  # multi-query
    # Pope et al.: 29 ms per token on 64 TPU v4, int8 weights, 2,048 tokens: our model is a
    # bound (HBM, FLOPs and collectives only)
    for batch in (1, 64):
        step = inference.decode(palm, "TPU v4p", 64, batch, 2048, "int8", kv_dtype="bf16")
        assert step.seconds < 0.029
        assert step.matmul.memory_s == pytest.approx(palm.params / (64 * 1.2e12), rel=0.01)


def test_tensor_parallel_latency_grows_with_the_slice():
    times = [inference.decode(LLAMA, "TPU v5e", n, 1, 4096).comm_s for n in (4, 16, 64, 256)]
    assert times == sorted(times)
    # 2 all-reduces per layer; each 2 x (hops) x 1 us on the slice, plus its bytes
    one = inference.network("TPU v5e", 16).price("all-reduce", LLAMA.hidden * 2)
    assert inference.decode(LLAMA, "TPU v5e", 16, 1, 4096).comm_s == pytest.approx(
        2 * LLAMA.layers * one.seconds)
    assert one.latency_s == pytest.approx(2 * (3 + 3) * 1e-6)  # a 4x4 without wraparound


def test_all_reduces_on_a_v5e_line_mesh_are_the_alpha_beta_model():
    """The chapter's decode times on v5e 4x4 and 4x2 (no wraparound) against the alpha-beta model
    written out: each pass (reduce-scatter, all-gather) sends (N-1)/N of V over one 4.5e10 B/s
    link per axis, and takes (n - 1) hops of 1 us per axis."""
    def all_reduce(v, shape):
        n = math.prod(shape)
        return 2 * ((n - 1) / n * v / (len(shape) * 4.5e10) + sum(k - 1 for k in shape) * 1e-6)

    for chips, shape, batch in ((16, (4, 4), 1), (16, (4, 4), 64), (8, (4, 2), 32)):
        step = inference.decode(LLAMA, "TPU v5e", chips, batch, 8192, "int8")
        assert step.comm_s == pytest.approx(
            2 * LLAMA.layers * all_reduce(batch * LLAMA.hidden * 2, shape), rel=1e-9)
    # the figure's text: on 16 chips (int8, S = 8,192) the all-reduces pass the weights' HBM
    # time at B = 64, the caches' at B = 52 ("near 50": 69.5e9 bytes of weights read, the input
    # embedding being a lookup, against 8,192 x 163,840 bytes of cache per sequence)
    weights = (LLAMA.params - LLAMA.vocab * LLAMA.hidden) / (16 * 8.1e11)
    first = next(b for b in range(1, 200)
                 if 2 * LLAMA.layers * all_reduce(b * LLAMA.hidden * 2, (4, 4)) > weights)
    step = inference.decode(LLAMA, "TPU v5e", 16, first, 8192, "int8")
    assert first == 64 and step.comm_s > step.matmul.memory_s
    assert inference.decode(LLAMA, "TPU v5e", 16, 63, 8192, "int8").comm_s < weights
    cached = math.ceil(weights * 16 * 8.1e11 / (8192 * 163_840))
    assert cached == 52 == next(b for b in range(1, 200) if (
        s := inference.decode(LLAMA, "TPU v5e", 16, b, 8192, "int8")).attention.memory_s
        > s.matmul.memory_s)


def test_batch_one_turns_communication_bound_and_still_gets_faster():
    steps = [inference.decode(LLAMA, "TPU v5e", n, 1, 4096) for n in (16, 32, 64, 256)]
    assert [s.bound for s in steps] == ["memory", "memory", "communication", "communication"]
    assert [round(s.seconds * 1e3, 2) for s in steps] == sorted(
        (round(s.seconds * 1e3, 2) for s in steps), reverse=True)


def test_the_explorers_suggestions_hold():
    # "S = 16,384 at B = 64 (the caches dominate)": it fits on the default 16 chips
    step = inference.decode(LLAMA, "TPU v5e", 16, 64, 16384, "int8")
    assert step.fits and step.attention.memory_s > 2 * step.matmul.memory_s
    assert not inference.decode(LLAMA, "TPU v5e", 16, 64, 65536, "int8").fits
    # "64 chips at B = 1 (the all-reduces do)", at the kernel's and the web page's contexts
    for context in (4096, 8192):
        assert inference.decode(LLAMA, "TPU v5e", 64, 1, context, "int8").bound == \
            "communication"


def test_2d_weight_stationary_beats_1d_past_the_scaling_books_81_chips():
    def total(shape, layout):
        return sum(inference.weight_stationary(LLAMA, "TPU v5p", shape, 256, layout).values())

    assert total((4, 4, 4), "1d") < total((4, 4, 4), "2d")  # 64 chips
    assert total((8, 8, 8), "2d") < total((8, 8, 8), "1d")  # 512 chips
    net = hw.tpu("TPU v5p", (4, 4, 4))
    rows = 256 * LLAMA.hidden * 2
    assert total((4, 4, 4), "1d") == pytest.approx(
        net.collective_time("all-gather", rows) + net.collective_time("reduce-scatter", rows))


def test_slices_chips_and_bad_counts():
    assert inference.slice_shape("TPU v5e", 16) == (4, 4)
    assert inference.slice_shape("TPU v5p", 64) == (4, 4, 4)
    with pytest.raises(ArgumentError, match="power of two"):
        inference.decode(LLAMA, "TPU v5e", 12, 1, 10)
    with pytest.raises(ArgumentError, match="nodes of 8"):
        inference.decode(LLAMA, "H100", 12, 1, 10)
    with pytest.raises(ArgumentError, match="dtype"):
        inference.decode(LLAMA, "H100", 8, 1, 10, "fp4")
    with pytest.raises(ArgumentError, match="model"):
        inference.kv_cache_bytes("LLaMA-9", 1)


def test_cost_per_million_tokens():
    step = inference.decode(LLAMA, "TPU v5e", 16, 64, 2048, "int8")
    assert step.cost_per_million(1.2) == pytest.approx(16 * 1.2 / 3600 * step.seconds / 64 * 1e6)


# --- serving -------------------------------------------------------------------------------

def test_moe_reads_the_experts_its_tokens_choose():
    assert inference.plan.experts_touched(8, 2, 1) == pytest.approx(2)
    assert inference.plan.experts_touched(8, 2, 1000) == pytest.approx(8)
    mixtral = hw.MODELS["Mixtral 8x7B"]
    one, many = (inference.decode(mixtral, "H100", 8, b, 0).weight_bytes for b in (1, 512))
    assert one < many == pytest.approx(inference.plan.read_params(mixtral, 10**6) * 2)


def test_disaggregation_prices_the_stalls():
    s = inference.disaggregate(LLAMA, "TPU v5e", 16, 16, prompt=4096, generated=256, batch=32)
    there = inference.prefill(LLAMA, "TPU v5e", 16, 4096).seconds
    assert s.colocated_s == pytest.approx(s.decode_s + 32 / 256 * there)
    assert s.transfer_s == pytest.approx(inference.kv_cache_bytes(LLAMA, 4096) /
                                         (16 * hw.TPUS["TPU v5e"].dcn))


@pytest.mark.parametrize(("rho", "gamma"), [(0.8, 4), (0.5, 2), (0.9, 8)])
def test_speculative_tokens_match_a_simulation(rho, gamma):
    tokens, speedup = inference.speculative(rho, gamma, 0.1)
    assert speedup == pytest.approx(tokens / (gamma * 0.1 + 1))
    for seed in range(5):  # accepted drafts up to the first rejection, plus the target's token
        accept = np.random.default_rng(seed).random((40_000, gamma)) < rho
        run = np.argmin(np.c_[accept, np.zeros(len(accept), bool)], axis=1) + 1
        assert run.mean() == pytest.approx(tokens, rel=0.02)
    assert inference.speculative(1.0, gamma, 0.0)[0] == gamma + 1
    assert inference.speculative(0.0, gamma, 0.0)[0] == 1


def test_speculation_is_the_formula_at_batch_one():
    got = inference.speculative_priced(LLAMA, "LLaMA-3 8B", "H100", 8, 1, 4096, 0.8, 4)
    assert got["priced"] == pytest.approx(got["formula"], rel=0.01)
    big = inference.speculative_priced(LLAMA, "LLaMA-3 8B", "H100", 8, 128, 4096, 0.8, 4)
    assert big["priced"] < big["formula"]


# --- the paged cache -----------------------------------------------------------------------

def test_block_table_hands_out_and_takes_back_blocks():
    t = paged.BlockTable(blocks=4, block=4)
    t.append("a", 5)
    t.append("b", 1)
    assert t.tables == {"a": [0, 1], "b": [2]} and t.used == 3
    t.release("a")
    t.append("c", 8)
    assert set(t.tables["c"]) == {0, 1} and t.used == 3  # a's blocks, reused
    with pytest.raises(ArgumentError, match="all taken"):
        t.append("d", 9)


def test_paging_wastes_less_than_a_block_per_request():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 2049, 100)
    r = paged.simulate(lengths, 2048, 16)
    assert r.tokens == lengths.sum() and r.contiguous == 100 * 2048
    assert r.paged == 16 * sum(-(-int(n) // 16) for n in lengths)
    assert r.paged - r.tokens < 16 * 100
    assert paged.simulate([32, 64], 64, 16).paged_waste == 0


def test_paged_attention_equals_the_contiguous_cache():
    rng = np.random.default_rng(1)
    k_pool, v_pool = (rng.standard_normal((6, 4, 2, 8)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((1, 4, 8)).astype(np.float32)
    table = [5, 0, 3]
    k = k_pool[table].reshape(1, -1, 2, 8)[:, :10]
    v = v_pool[table].reshape(1, -1, 2, 8)[:, :10]
    want, _ = tiny.attend(q, k, v, jnp.ones(10, bool))
    np.testing.assert_allclose(paged.paged_attention(q, k_pool, v_pool, table, 10), want,
                               rtol=1e-5, atol=1e-6)


# --- the sharded decode step ---------------------------------------------------------------

def test_plan_bytes_from_the_formulas():
    c = tiny.Config()
    assert shards.plan("heads", c, 4).kinds() == {"all-reduce": 2 * c.layers}
    a2a = [x for x in shards.plan("batch", c, 4) if x.kind == "all-to-all"]
    assert len(a2a) == 2 * c.layers and a2a[0].bytes == c.batch // 4 * c.heads * c.head_dim * 4
    assert shards.cache_per_device("heads", c, 8) == c.cache_bytes() // c.kv_heads
    assert shards.cache_per_device("sequence", c, 8) == c.cache_bytes() // 8
    assert shards.plan("heads", c, 1) == []


def test_prefill_writes_what_decoding_the_prompt_writes():
    c = tiny.Config(layers=1, batch=2, prompt=5, context=8)
    params, prompt = tiny.init(c), tiny.prompt_tokens(c)
    logits, cache = tiny.prefill(params, prompt, c)
    steps = tiny.empty_cache(c)
    for pos in range(c.prompt):
        last, steps = tiny.decode_step(params, steps, prompt[:, pos], pos, c)
    np.testing.assert_allclose(steps["k"], cache["k"], atol=1e-5)
    np.testing.assert_allclose(last, logits, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("scheme", "devices", "kv_heads"),
                         [("heads", 4, 2), ("heads", 2, 8), ("batch", 4, 2), ("sequence", 2, 4)])
def test_check_equals_one_device_and_the_plan(scheme, devices, kv_heads):
    found = inference.check(scheme, devices, steps=3, kv_heads=kv_heads)
    assert found.error < 1e-5 and len(found.tokens) == 3
    c = dataclasses.replace(tiny.Config(), kv_heads=kv_heads)
    ar = ("all-reduce", c.batch * c.hidden * 4)
    assert sum(1 for x in found if (x.kind, x.bytes) == ar) == 2 * c.layers
    expected_copies = max(1, devices // kv_heads) if scheme == "heads" else 1
    assert found.replicas == expected_copies
    assert found.memory.alias == found.cache_bytes  # the cache is written in place


def _check_space():
    """``inference.check``'s module globals (not those of its argument-checking wrapper)."""
    return inspect.unwrap(inference.check).__globals__


@pytest.mark.slow
def test_check_catches_a_plan_with_one_all_reduce_too_few(monkeypatch):
    space = _check_space()
    real = space["plan"]
    monkeypatch.setitem(space, "plan",
                        lambda *a, **k: type(real(*a, **k))(list(real(*a, **k))[1:]))
    with pytest.raises(CheckFailed, match="collectives"):
        inference.check("heads", 4, steps=2)


@pytest.mark.slow
def test_check_catches_a_step_that_forgets_to_write_the_cache(monkeypatch):
    """A sharded step that returns the cache it was given: its first token is right (it attends
    to the new key inside the step), the second misses the first's key and value."""
    space = _check_space()
    real = space["program"]

    def forgetful(scheme, mesh, config):
        step = real(scheme, mesh, config)
        return jax.jit(lambda p, cache, t, pos: (step(p, cache, t, pos)[0], cache))

    monkeypatch.setitem(space, "program", forgetful)
    with pytest.raises(CheckFailed, match="logits at step 2"):
        inference.check("batch", 4, steps=2)


@pytest.mark.slow
def test_check_catches_a_wrong_count_of_cache_bytes(monkeypatch):
    space = _check_space()
    real = space["cache_per_device"]
    monkeypatch.setitem(space, "cache_per_device", lambda *a: 2 * real(*a))
    with pytest.raises(CheckFailed, match="bytes of keys"):
        inference.check("sequence", 2, steps=1)


def test_check_refuses_sizes_that_do_not_split():
    with pytest.raises(ShardingError, match="do not split"):
        inference.check("batch", devices=3)
    with pytest.raises(ShardingError, match="kv_heads"):
        inference.check("heads", devices=8, kv_heads=3)
    with pytest.raises(ArgumentError, match="scheme"):
        inference.check("tensor", devices=8)


def test_explorer_and_live_figure():
    html, fig = inference.render_decode(system="H100", chips=8, batch=16, context=4096)
    assert "ms per token" in html and fig.axes
    rows = inference.explore.decode_rows("TPU v5e", 16, 16, 4096, "int8")
    step = inference.decode(LLAMA, "TPU v5e", 16, 16, 4096, "int8")
    bars = {r["what"]: r["value"] for r in rows if "what" in r}
    assert bars["all-reduces"] == pytest.approx(step.comm_s * 1e3, abs=1e-6)
    assert serve.CHIP_HOUR["TPU v5e"] == 1.2
