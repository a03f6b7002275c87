"""Pipeline schedules: simulated makespan, bubble and memory against the papers' formulas."""

import io
import itertools

import jax
import numpy as np
import pytest
from checking import fails as _fails
from checking import passes as _passes
from checking import stub as _stub
from PIL import Image

from tpviz.core.figures import png as draw_png
from tpviz.devices import chosen_devices
from tpviz.errors import DeviceSetupError, ShardingError
from tpviz.pipeline import (
    NAMES,
    ScheduleError,
    balance,
    bubble_formula,
    draw,
    run,
    schedule,
    simulate,
    spmd,
    spmd_check,
)

F, B = 1.0, 2.0
GRID = [(p, m) for p in (1, 2, 4, 8) for m in (1, 2, 4, 8, 16)]


@pytest.mark.parametrize(("p", "m"), GRID)
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(p, m):
    for name in ("gpipe", "1f1b"):
        t = simulate(schedule(name, p, m), F, B)
        assert t.makespan == pytest.approx((m + p - 1) * (F + B))
        assert t.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize(("p", "m"), GRID)
def test_peak_activations_gpipe_m_and_1f1b_p_minus_d(p, m):
    assert simulate(schedule("gpipe", p, m)).peak_activations == (m,) * p
    assert simulate(schedule("1f1b", p, m)).peak_activations == tuple(
        min(p - d, m) for d in range(p))


@pytest.mark.parametrize(("p", "m"), GRID)
def test_naive_leaves_all_but_one_device_idle(p, m):
    t = simulate(schedule("naive", p, m), F, B)
    assert t.bubble_fraction == pytest.approx((p - 1) / p)


@pytest.mark.parametrize(("p", "m", "v"), [(p, k * p, v) for p in (2, 4, 8) for k in (1, 2, 4)
                                           for v in (2, 3, 4)])
def test_interleaved_bubble_is_p_minus_1_over_v_m_of_the_ideal(p, m, v):
    t = simulate(schedule("interleaved", p, m, v), F, B)
    ideal = m * (F + B)
    assert t.makespan - ideal == pytest.approx((p - 1) / (v * m) * ideal)
    for d, ops in enumerate(t.schedule.ops):  # chunk s lives on device s % p
        assert all(op.chunk % p == d for op in ops)
        assert len(ops) == 2 * m * v


@pytest.mark.parametrize(("p", "m"), [(p, m) for p, m in GRID if m >= p])
def test_zero_bubble_h1_idle_is_p_minus_1_forwards(p, m):
    # ZB-H1 (Qi et al.): with B and W each half of the backward, the drain is filled by deferred W's
    # and each device idles (p - 1) * T_F instead of (p - 1) * (T_F + T_B + T_W).
    t = simulate(schedule("zb-h1", p, m), F, B)
    assert t.makespan == pytest.approx(m * (F + B) + (p - 1) * F)
    # W needs the layer's input, so a deferred W keeps its microbatch's activations: every device
    # peaks at p, which is 1F1B's peak on its first device (the paper's memory bound p * M_B)
    assert t.peak_activations == (p,) * p
    assert max(t.peak_activations) == max(simulate(schedule("1f1b", p, m)).peak_activations)
    kinds = [op.kind for op in t.schedule.ops[0]]
    assert kinds.count("W") == kinds.count("B") == m


def test_every_op_runs_once_and_after_its_inputs():
    t = simulate(schedule("interleaved", 4, 8, 2), F, B, p2p=0.25)
    end = {}
    for d in range(4):
        for op, start, stop in t.spans(d):
            assert op not in end
            end[op] = (start, stop, d)
    last = 4 * 2 - 1
    for (kind, mb, st), (start, _, d) in end.items():
        dep = (("F", mb, st - 1) if kind == "F" and st else
               ("B", mb, st + 1) if kind == "B" and st < last else
               ("F", mb, last) if kind == "B" else None)
        if dep:
            _, dep_end, dep_device = end[dep]
            assert start >= dep_end + (0.25 if dep_device != d else 0) - 1e-12


@pytest.mark.parametrize(
    ("args", "words"),
    [(("pipedreem", 4, 8), "not one of the choices: 'naive', 'gpipe', '1f1b', 'interleaved'"),
     (("interleaved", 4, 6, 2), "multiple of 4"),
     (("gpipe", 0, 8), "stages must be a positive integer"),
     (("1f1b", 4, -1), "microbatches must be a positive integer"),
     (("gpipe", 4, 8, 2), "use 'interleaved'")],
)
def test_bad_input(args, words):
    with pytest.raises(ScheduleError, match=words):
        schedule(*args)


def test_names_are_the_contract():
    assert set(NAMES) >= {"naive", "gpipe", "1f1b", "interleaved", "zb-h1"}


def test_a_deadlocking_order_is_reported():
    from tpviz.pipeline import Op, Schedule

    bad = Schedule("bad", 2, 1, 1, ((Op("B", 0, 0), Op("F", 0, 0)), (Op("F", 0, 1), Op("B", 0, 1))))
    with pytest.raises(ScheduleError, match="deadlocks"):
        simulate(bad)


def test_the_benchmark_size_has_the_formula_bubble():
    # 64 stages x 1024 microbatches x 4 chunks (timed by benchmarks/budgets.py, budget < 1 s)
    t = simulate(schedule("interleaved", 64, 1024, 4))
    assert t.makespan == pytest.approx(1024 * 3 * (1 + 63 / (4 * 1024)))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("p", "m", "v"), [(2, 4, 2), (4, 8, 2), (4, 16, 3), (8, 8, 4)])
def test_bubble_formula_matches_the_simulation(name, p, m, v):
    v = v if name == "interleaved" else 1
    t = simulate(schedule(name, p, m, v), F, B)
    expected, formula = bubble_formula(name, p, m, v, F, B)
    assert t.bubble_fraction == pytest.approx(expected), formula


# --- balanced stages: the dynamic programme against brute force over every set of cuts ----------

def brute_force_slowest(costs, p):
    return min(max(sum(costs[a:b]) for a, b in itertools.pairwise((0, *cuts, len(costs))))
               for cuts in itertools.combinations(range(1, len(costs)), p - 1))


@pytest.mark.parametrize("seed", range(12))
def test_balance_is_optimal(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 10))
    costs = [int(c) for c in rng.integers(1, 20, n)]
    for p in range(1, n + 1):
        part = balance(costs, p)
        assert part.slowest == brute_force_slowest(costs, p)
        assert [a for a, _ in part.bounds] == [0, *(b for _, b in part.bounds[:-1])]  # contiguous
        assert part.bounds[-1][1] == n and all(b > a for a, b in part.bounds)  # covers, non-empty


def test_balance_beats_greedy_and_reports_the_imbalance_bubble():
    part = balance([4, 1, 1, 1, 1, 4], 3)
    assert part.stage_costs == (4, 4, 4)
    assert part.imbalance_bubble == 0
    uneven = balance([1, 1, 1, 5], 2)
    assert uneven.stage_costs == (3, 5)
    assert uneven.imbalance_bubble == pytest.approx(1 - 8 / (2 * 5))


@pytest.mark.parametrize(("costs", "p", "words"), [([1, 2], 3, "at most 2 stages"),
                                                   ([1, -2, 3], 2, "must be at least 0"),
                                                   ([1, 2], 0, "positive integer")])
def test_balance_bad_input(costs, p, words):
    with pytest.raises(ScheduleError, match=words):
        balance(costs, p)


# --- the Python-loop pipelined MLP on 4 devices (numerics only) ----------------------------------------------------------

@pytest.mark.parametrize(("name", "v"), [("naive", 1), ("gpipe", 1), ("1f1b", 1), ("zb-h1", 1),
                                         ("interleaved", 2)])
def test_pipelined_mlp_has_the_reference_loss_and_gradients(name, v):
    devices = chosen_devices()[:4]
    params = run.init([12] * (4 * v + 1), seed=v)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 12), dtype=np.float32)
    target = rng.standard_normal((16, 12), dtype=np.float32)
    sched = schedule(name, 4, 8, v)
    result = run.run(sched, params, x, target, devices)
    with jax.default_device(chosen_devices()[0]):
        loss, grads = jax.value_and_grad(run.loss_fn)(params, x, target)
    assert result.loss == pytest.approx(float(loss), rel=1e-5)
    for s, (got, want) in enumerate(zip(result.grads, grads, strict=True)):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)
            assert g.devices() == {devices[s % 4]}  # each chunk's gradients stay on its device


def test_pipelined_mlp_rejects_mismatched_input():
    params = run.init([4] * 5)
    x = np.zeros((6, 4), np.float32)
    with pytest.raises(ShardingError, match="4 equal microbatches"):
        run.run(schedule("gpipe", 4, 4), params, x, x, chosen_devices()[:4])
    with pytest.raises(ShardingError, match="the model has 4 layers"):
        run.run(schedule("gpipe", 2, 3), params, x, x, chosen_devices()[:2])
    with pytest.raises(DeviceSetupError, match="need 4 devices"):
        run.run(schedule("gpipe", 4, 3), params, x, x, chosen_devices()[:2])


# --- drawings ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "p", "m", "v"), [("zb-h1", 4, 8, 1), ("interleaved", 16, 64, 4)])
def test_gantt_draws_every_device_and_the_bubble(name, p, m, v):
    t = simulate(schedule(name, p, m, v))
    fig = draw.gantt(t)
    ax = fig.axes[0]
    assert ax.get_ylim() == (p - 0.5, -0.5)
    assert f"bubble {t.bubble_fraction:.1%}" in ax.get_title(loc="left")
    assert draw_png(fig)[:4] == b"\x89PNG"


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1"])
def test_memory_over_time_peaks_at_the_simulated_peak(name):
    t = simulate(schedule(name, 4, 8))
    for d in range(4):
        times, held = draw.held_over_time(t, d)
        assert held.max() == t.peak_activations[d]
        assert held[-1] == 0 and (np.diff(times) >= 0).all()


def test_animation_is_a_gif_with_a_frame_per_step():
    gif = draw.animate(simulate(schedule("1f1b", 2, 2)), frames=5)
    image = Image.open(io.BytesIO(gif.gif))
    assert image.format == "GIF" and image.n_frames >= 5
    assert gif._repr_html_().startswith('<img src="data:image/gif;base64,')


# --- the SPMD pipeline: one compiled program -----------------------------------------------------

@pytest.mark.parametrize(("p", "m"), [(4, 8), (2, 5), (3, 3), (4, 1)])
def test_lock_step_ticks_play_every_op_once_in_order(p, m):
    for name in ("gpipe", "1f1b"):
        sched = schedule(name, p, m)
        tk = spmd.ticks(sched)
        # F and B take one tick each: (m + p - 1) ticks of forwards and as many of backwards
        assert tk.count == 2 * (m + p - 1)
        for d in range(p):
            ran = [("F" if tk.kind[t][d] == spmd.FWD else "B", tk.microbatch[t][d], d)
                   for t in range(tk.count) if tk.kind[t][d] != spmd.IDLE]
            assert ran == list(sched.ops[d])
        # stash slots: GPipe holds all m microbatches, 1F1B at most p (PipeDream-Flush)
        assert tk.slots == (m if name == "gpipe" else min(p, m))


def test_spmd_pipeline_rejects_split_or_interleaved_schedules():
    for sched in (schedule("zb-h1", 4, 8), schedule("interleaved", 4, 8, 2)):
        with pytest.raises(ScheduleError, match=r"needs run\.run"):
            spmd.ticks(sched)


@pytest.fixture(scope="module")
def spmd_runs():
    return {name: spmd_check(name, 4, 8) for name in ("gpipe", "1f1b")}


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_spmd_pipeline_matches_one_device_and_sends_what_the_schedule_sends(spmd_runs, name):
    r = spmd_runs[name]
    p, m, rows, width = 4, 8, 32, 16
    assert r.loss_error < 1e-5 and r.grad_error < 1e-5
    assert set(r.collectives.kinds()) == {"collective-permute"}
    # every F but the last stage's sends its output on, every B but the first stage's sends its
    # input gradient back: 2 m (p - 1) sends of one microbatch (rows x width float32) each
    transfers = 2 * m * (p - 1)
    assert r.transfers() == (transfers, transfers * rows * width * 4)
    pairs = [pair for c in r.collectives for pair in c.groups]
    assert sorted(pairs) == sorted([(d, d + 1) for d in range(p - 1)] * m
                                   + [(d + 1, d) for d in range(p - 1)] * m)
    assert r.peak_bytes == r.memory.argument + r.memory.output + r.memory.temp


def test_1f1b_needs_less_compiled_memory_and_the_stash_accounts_for_it(spmd_runs):
    gpipe, one_f_one_b = spmd_runs["gpipe"], spmd_runs["1f1b"]
    assert (gpipe.stash_slots, one_f_one_b.stash_slots) == (8, 4)  # m and p
    assert (gpipe.simulated_peak, one_f_one_b.simulated_peak) == (8, 4)
    assert one_f_one_b.peak_bytes < gpipe.peak_bytes
    # one more stash slot for 1F1B: what one slot costs in the compiled program; GPipe's 4 extra
    # slots account for the difference within 10 %
    bigger = spmd_check("1f1b", 4, 8, slots=5)
    per_slot = bigger.memory.temp - one_f_one_b.memory.temp
    assert per_slot >= one_f_one_b.microbatch_bytes  # at least the slot itself
    difference = gpipe.memory.temp - one_f_one_b.memory.temp
    assert difference == pytest.approx(4 * per_slot, rel=0.1)


# --- new checkers (issue 14): right answer, plausible wrong answers, stub ---------------------




def test_check_pipeline_design(capsys):
    from tpviz.exercises import check_pipeline_design

    # 7 / (v m + 7) <= 0.07 needs v m >= 93; v | 6, m in {8, 16, 24, 32}; sends m (8 v - 1)
    # <= 800: (32, 3) with 736 and (16, 6) with 752; (24, 6) and (32, 6) send more
    _passes(check_pipeline_design, 32, 3, 32 * 23, capsys=capsys)
    _passes(check_pipeline_design, 16, 6, 16 * 47, capsys=capsys)
    _fails(check_pipeline_design, 24, 6, 24 * 47, words="over 800")
    _fails(check_pipeline_design, 24, 3, 24 * 23, words="bubble of 8.9")  # 7 / 79
    _fails(check_pipeline_design, 16, 6, 16 * 7, words="sends between stages")  # m (p - 1)
    _fails(check_pipeline_design, 16, 6, 700, words="activation sends")
    _fails(check_pipeline_design, 20, 6, 940, words="not allowed")
    _fails(check_pipeline_design, 32, 4, 32 * 31, words="not allowed")
    _stub(check_pipeline_design, ..., 6, 1, capsys=capsys)

