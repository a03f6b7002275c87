"""ZeRO: the paper's memory figures, and real training steps whose state, collectives and
parameters match the plan, plain data parallelism and one device."""

import pytest
from checking import fails as _fails
from checking import passes as _passes
from checking import stub as _stub

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


# --- layer by layer, measured on the compiled step ------------------------------------------------

L, H, N = 4, 256, 8
R = 264  # H + 1 = 257 rows (W and b) padded to a multiple of N
LAYER = R * H * 4  # bytes of one layer's parameters, padding included
PSI = L * R * H  # numbers stored per model


@pytest.fixture(scope="module")
def measured():
    return {stage: zero.measure(stage, L, H, devices=N) for stage in range(4)}


def test_model_keeps_each_layer_padded_to_a_multiple_of_the_devices():
    model = run.Model(L, H, N)
    assert (model.rows, model.layer_padded, model.padded) == (R, R * H, PSI)
    assert model.rows % N == 0 and model.count == L * (H * H + H)


def test_measured_memory_is_ordered_and_near_the_plan(measured):
    peaks = [measured[s].peak_bytes for s in range(4)]
    assert peaks[0] > peaks[1] > peaks[2] > peaks[3]
    # the plan: fp32 params and gradients (4 + 4 bytes), Adam m and v (8 bytes), plus buffers
    whole, split = PSI * 4, PSI * 4 / N
    planned = [whole + whole + 2 * whole,  # stage 0: everything whole
               whole + whole + 2 * split + LAYER,  # stage 1: + the updated layer's all-gather
               whole + split + 2 * split + 2 * LAYER,  # stage 2: + a layer's gradient, gather
               split + split + 2 * split + 2 * LAYER]  # stage 3: + a gathered layer, a gradient
    for s in range(4):
        assert measured[s].planned_bytes == pytest.approx(planned[s])
        assert measured[s].peak_bytes == pytest.approx(planned[s], rel=zero.check.TOLERANCE)
        m = measured[s].memory
        assert measured[s].peak_bytes == m.argument + m.output - m.alias + m.temp


def test_donated_state_is_written_in_place(measured):
    for s in range(4):
        m = measured[s].memory
        state = PSI * 4 * ((1 if s < 3 else 1 / N) + 2 * (1 if s == 0 else 1 / N))
        assert m.alias == pytest.approx(state)  # params, m and v: every byte reused
        # only the loss is new: 4 bytes, and the output tuple's table of 3 L + 1 pointers
        assert m.output - m.alias == 4 + 8 * (3 * L + 1)


def test_stage_1_holds_the_whole_gradient_stage_2_one_layer_of_it(measured):
    # stages 1 and 2 have the same arguments (whole params, split m and v); the temporaries
    # differ by the gradient: whole at stage 1 (4 Psi bytes), 1/N of it plus one layer's whole
    # gradient at stage 2 (4 Psi / N + one layer)
    one, two = measured[1].memory, measured[2].memory
    assert one.argument == two.argument
    assert one.temp - two.temp == pytest.approx(PSI * 4 * (1 - 1 / N) - LAYER, rel=0.1)


def test_compiled_collectives_are_the_stages_layer_by_layer(measured):
    kinds = [{"all-reduce": L}, {"reduce-scatter": L, "all-gather": L},
             {"reduce-scatter": L, "all-gather": L},
             {"all-gather": 2 * L - 1, "reduce-scatter": L}]  # layer 0's backward needs no W
    for s in range(4):
        found = measured[s].collectives
        assert dict(found.kinds()) == kinds[s]
        assert all(c.bytes == (LAYER // N if c.kind == "reduce-scatter" else LAYER)
                   for c in found)
    ring = [measured[s].collectives.sent_bytes() for s in range(4)]
    assert ring[0] == ring[1] == ring[2] == pytest.approx(L * 2 * (N - 1) / N * LAYER)
    # stage 3: 2L - 1 gathers and L scatters against L all-reduces; 1.5x as L grows
    assert ring[3] / ring[0] == pytest.approx((3 * L - 1) / (2 * L))


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_parameters_after_adam_steps_equal_one_devices(stage):
    assert zero.check.train(stage, layers=4, width=30, steps=3) < 1e-5  # 31 rows -> 32


def test_measure_rejects_bad_input():
    with pytest.raises(zero.ZeroError, match="stage = 4 is not one of the choices: 0, 1, 2, 3"):
        zero.measure(4, 4, 16)
    with pytest.raises(zero.ZeroError, match="layers must be a positive integer"):
        zero.measure(1, 0, 16)


def test_drawings():
    fig = draw.memory_bars(7.5e9, 64, stage=2)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "120.0 GB\nsends 29.5 GB/step" in texts  # 2 * 63/64 * 7.5e9 * 2 bytes = 29.5 GB
    assert "1.9 GB\nsends 44.3 GB/step" in texts
    assert len(draw.partitions(4).axes) == 4


# --- new checkers (issue 14): right answer, plausible wrong answers, stub ---------------------




def test_check_stage3_bytes(capsys):
    from tpviz.exercises import check_stage3_bytes

    psi_bytes = 2 * 1.5e9
    _passes(check_stage3_bytes, 3 * 15 / 16 * psi_bytes / 1e9, capsys=capsys)  # 8.4375 GB
    _fails(check_stage3_bytes, 2 * 15 / 16 * psi_bytes / 1e9, words="data parallelism")
    _fails(check_stage3_bytes, 3 * psi_bytes / 1e9, words="ring")
    _stub(check_stage3_bytes, ..., capsys=capsys)


def test_check_stage3_ratio(capsys):
    from tpviz.exercises import check_stage3_ratio

    _passes(check_stage3_ratio, 71 / 48, capsys=capsys)  # 2L - 1 gathers + L scatters, L = 24
    _fails(check_stage3_ratio, 1.5, words="limit")
    _fails(check_stage3_ratio, 11 / 8, words="4-layer")
    _stub(check_stage3_ratio, ..., capsys=capsys)


def test_check_zero_design(capsys):
    from tpviz.exercises import check_zero_design

    # 60 GB of room: stage 1 needs 80 GB + more, never; stage 2: 40 + 280/N <= 60 -> N = 14,
    # sends 2 (13/14) 40 GB; stage 3: 320/N <= 60 -> N = 6, sends 3 (5/6) 40 GB = 100 GB.
    # stage 3 on 9 devices: 3 (8/9) 40 GB = 106.7 GB, over the 105 GB budget. Several choices
    # are admissible (a design with more than one answer): stage 2 on 14-16, stage 3 on 6-8.
    _passes(check_zero_design, 2, 14, 2 * 13 / 14 * 40, capsys=capsys)
    _passes(check_zero_design, 3, 6, 3 * 5 / 6 * 40, capsys=capsys)
    _passes(check_zero_design, 2, 16, 2 * 15 / 16 * 40, capsys=capsys)
    _fails(check_zero_design, 3, 9, 3 * 8 / 9 * 40, words="over the 105 GB budget")
    _fails(check_zero_design, 2, 13, 2 * 12 / 13 * 40, words="more than 60 GB")
    _fails(check_zero_design, 1, 16, 75, words="more than 60 GB")
    _fails(check_zero_design, 2, 14, 80, words="GB sent")
    _stub(check_zero_design, 2, ..., 1, capsys=capsys)
