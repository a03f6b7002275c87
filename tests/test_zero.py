"""ZeRO: the paper's memory figures, and real training steps whose state, collectives and
parameters match the plan, plain data parallelism and one device."""

import numpy as np
import pytest

import tpviz
from tpviz import zero
from tpviz.zero import draw, run


@pytest.mark.parametrize(("stage", "gb"), [(0, 120), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_memory_reproduces_the_zero_paper(stage, gb):
    # Rajbhandari et al. 2020, Figure 1: a 7.5B-parameter model on 64 devices, K = 12
    assert zero.memory(7.5e9, 64, stage).total / 1e9 == pytest.approx(gb, abs=0.05)


def test_memory_formulas_by_category():
    psi, n = 1000.0, 10
    assert zero.memory(psi, n, 0) == zero.Memory(2 * psi, 2 * psi, 12 * psi)
    assert zero.memory(psi, n, 1) == zero.Memory(2 * psi, 2 * psi, 12 * psi / n)
    assert zero.memory(psi, n, 2) == zero.Memory(2 * psi, 2 * psi / n, 12 * psi / n)
    assert zero.memory(psi, n, 3).total == pytest.approx(16 * psi / n)


def test_communication_is_that_of_data_parallelism_until_stage_3():
    psi, n = 1e9, 8
    ring_all_reduce = 2 * (n - 1) / n * psi * 2  # bf16 gradients
    assert [zero.communication(psi, n, s) for s in range(3)] == [ring_all_reduce] * 3
    assert zero.communication(psi, n, 3) == pytest.approx(1.5 * ring_all_reduce)


def test_smallest_devices():
    # stage 2, 13B, 40 GB: 26 GB + 182 GB / N <= 40 GB  <=>  N >= 13
    assert zero.smallest_devices(13e9, 2, 40e9) == 13
    assert zero.memory(13e9, 13, 2).total <= 40e9 < zero.memory(13e9, 12, 2).total
    assert zero.smallest_devices(13e9, 3, 40e9) == 6  # 208 GB / N <= 40 GB
    assert zero.smallest_devices(13e9, 0, 40e9) is None  # 208 GB on every device, always


@pytest.mark.parametrize(("call", "words"), [
    (lambda: zero.memory(1e9, 8, 4), "stage = 4 is not one of the choices: 0, 1, 2, 3"),
    (lambda: zero.memory(-1, 8, 1), "params must be positive"),
    (lambda: zero.memory(1e9, 0, 1), "devices must be a positive integer"),
    (lambda: zero.communication(1e9, 8, 1, param_bytes=0), "param_bytes must be positive"),
])
def test_bad_input(call, words):
    with pytest.raises(zero.ZeroError, match=words):
        call()


@pytest.fixture(scope="module")
def mesh():
    return tpviz.make_mesh((8,), ("data",))


@pytest.mark.parametrize("sizes", [(16, 32, 16), (16, 30, 16)])  # 1,072 and 1,006 (padded) params
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_real_training_matches_one_device_memory_and_collectives(mesh, sizes, stage):
    model = run.Model(sizes, 8)
    assert model.padded % 8 == 0 and model.padded - model.count < 8
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 16), dtype=np.float32)
    target = rng.standard_normal((32, 16), dtype=np.float32)
    c = run.check(model, mesh, stage, x, target, steps=3)  # raises if anything differs
    assert c.max_error < 1e-5
    plan = zero.memory(model.padded, 8, stage, param_bytes=4, grad_bytes=4, optimizer_bytes=8)
    assert c.measured == {"params": plan.params, "grads": plan.grads, "optimizer": plan.optimizer}
    kinds = dict(c.collectives.kinds())
    assert kinds == [{"all-reduce": 1}, {"reduce-scatter": 1, "all-gather": 1},
                     {"reduce-scatter": 1, "all-gather": 1},
                     {"all-gather": 2, "reduce-scatter": 1}][stage]
    full = model.padded * 4
    assert all(k.bytes == (full // 8 if k.kind == "reduce-scatter" else full) for k in c.collectives)
    assert c.losses[-1] < c.losses[0]  # it trains
    np.testing.assert_array_equal(c.params[model.count:], 0)  # the padding stays zero


def test_stages_agree_with_each_other(mesh):
    model = run.Model((16, 32, 16), 8)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 16), dtype=np.float32)
    target = rng.standard_normal((16, 16), dtype=np.float32)
    results = [run.check(model, mesh, s, x, target, steps=2).params for s in range(4)]
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], rtol=1e-6, atol=1e-7)


def test_drawings():
    fig = draw.memory_bars(7.5e9, 64, stage=2)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "120.0 GB\nsends 29.5 GB/step" in texts  # 2 * 63/64 * 7.5e9 * 2 bytes = 29.5 GB
    assert "1.9 GB\nsends 44.3 GB/step" in texts
    assert len(draw.partitions(4).axes) == 4
