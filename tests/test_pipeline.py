"""Pipeline schedules: simulated makespan, bubble and memory against the papers' formulas."""

import pytest

from tpviz.pipeline import NAMES, ScheduleError, schedule, simulate

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
        assert all(op.stage % p == d for op in ops)
        assert len(ops) == 2 * m * v


@pytest.mark.parametrize(("p", "m"), [(p, m) for p, m in GRID if m >= p])
def test_zero_bubble_h1_idle_is_p_minus_1_forwards(p, m):
    # ZB-H1 (Qi et al.): with B and W each half of the backward, the drain is filled by deferred W's
    # and each device idles (p - 1) * T_F instead of (p - 1) * (T_F + T_B + T_W).
    t = simulate(schedule("zb-h1", p, m), F, B)
    assert t.makespan == pytest.approx(m * (F + B) + (p - 1) * F)
    assert t.peak_activations == simulate(schedule("1f1b", p, m)).peak_activations
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
    [(("pipedream", 4, 8), "known ones are naive, gpipe, 1f1b, interleaved, zb-h1"),
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
