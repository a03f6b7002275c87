"""Chapter 8's schedule zoo: bubble, staleness and weight copies against each paper's formula."""

import itertools

import pytest

from tpviz.errors import ScheduleError
from tpviz.pipeline import schedule, simulate, spmd, steady_state


@pytest.mark.parametrize("p", [2, 4, 8])
def test_pipedream_stashes_p_minus_s_versions_and_is_p_minus_1_minus_s_stale(p):
    # PipeDream (Narayanan et al. 2019): stage s (0-based) keeps p - s versions; 2BW's paper
    # writes PipeDream's update with delay p - 1 - s on stage s
    t = simulate(schedule("pipedream", p, 4 * p), 1.0, 2.0)
    assert t.weight_copies == tuple(float(p - s) for s in range(p))
    assert t.staleness == tuple(p - 1 - s for s in range(p))


@pytest.mark.parametrize("p", [2, 4, 8])
def test_2bw_keeps_two_versions_one_update_stale(p):
    # PipeDream-2BW (Narayanan et al. 2021): W(t+1) = W(t) - lr grad f(W(t-1)), 2 versions
    t = simulate(schedule("2bw", p, 4 * p), 1.0, 2.0)
    assert t.staleness == (1,) * p
    assert t.weight_copies == (2.0,) * p


@pytest.mark.parametrize("name", ["pipemare", "ampnet"])
def test_no_stash_schedules_keep_one_copy_but_read_stale_forwards(name):
    p = 4
    t = simulate(schedule(name, p, 16), 1.0, 2.0)
    assert t.weight_copies == (1.0,) * p
    assert t.staleness == (3, 2, 1, 0)
    # the backward reads the newest weights, the forward an older one: they differ (s < p-1)
    sched = t.schedule
    for d in range(p - 1):
        fwd = {op.microbatch: v for op, v in zip(sched.ops[d], t.versions[d], strict=True)
               if op.kind == "F"}
        bwd = {op.microbatch: v for op, v in zip(sched.ops[d], t.versions[d], strict=True)
               if op.kind == "B"}
        assert bwd[8] - fwd[8] == p - 1 - d


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "chimera", "zb-v", "dualpipe"])
def test_synchronous_schedules_are_never_stale(name):
    t = simulate(schedule(name, 4, 8), 1.0, 2.0)
    assert t.staleness == (0,) * 4
    assert set(v for row in t.versions for v in row) == {0}


@pytest.mark.parametrize("p", [4, 6, 8])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_chimera_bubble_is_p_minus_2_over_2m_plus_p_minus_2_at_twice_the_weights(p, k):
    # Chimera (Li & Hoefler 2021), Table 1: bubble (D-2)/(2N+D-2), t_F = t_B; for N > D the
    # basic units (N = D) are directly concatenated (their Sec. 3.5); weights 2 M_theta;
    # activations between (D/2 + 1) M_a and D M_a (N = D), at most D M_a for any N
    m = k * p
    t = simulate(schedule("chimera", p, m), 1.0, 1.0)
    assert t.bubble_fraction == pytest.approx((p - 2) / (2 * m + p - 2))
    assert t.weight_copies == (2.0,) * p
    assert max(t.peak_activations) == p
    if k == 1:
        assert min(t.peak_activations) == p // 2 + 1


@pytest.mark.parametrize("p", [4, 8])
def test_zb_h2_memory_and_zb_v_memory_against_qi_et_al(p):
    # Qi et al. 2024: ZB-H2 holds up to (2p-1) M_B; ZB-V the 1F1B peak p M_B (2p half-size
    # chunks); both have less bubble than ZB-H1, (p-1)(T_F+T_B-T_W) with T_F = T_B = T_W
    h2 = simulate(schedule("zb-h2", p, 2 * p), 1.0, 1.0, 1.0)
    assert max(h2.peak_activations) == 2 * p - 1
    zbv = simulate(schedule("zb-v", p, 2 * p), 1.0, 1.0, 1.0)
    assert max(zbv.peak_activations) <= 2 * p and zbv.weight_copies == (1.0,) * p
    h1 = simulate(schedule("zb-h1", p, 2 * p), 1.0, 1.0, 1.0)
    assert h1.makespan - h1.work(0) == pytest.approx((p - 1) * (1 + 1 - 1))
    assert h2.bubble_fraction <= h1.bubble_fraction + 1e-12
    assert zbv.bubble_fraction < h1.bubble_fraction


@pytest.mark.parametrize("p", [4, 8])
def test_dualpipe_memory_and_bubble_match_deepseeks_table(p):
    # deepseek-ai/DualPipe README (DeepSeek-AI 2024): PP stages; parameters 2x, activations
    # PP + 1 per device; bubble (PP/2 - 1)(F&B + B - 3W), B a full backward, F&B one
    # overlapped forward-and-backward op (here F + B: ideal devices overlap no compute)
    for tf, tb, tw in [(1.0, 1.0, 1.0), (1.0, 2.0, 1.0), (1.0, 1.0, 0.5), (0.5, 1.0, 1.0)]:
        for name, v in (("dualpipe", 1), ("dualpipev", 2)):  # DualPipeV: PP = 2p half stages
            t = simulate(schedule(name, p, 2 * p), tf, tb, tw)
            f, full, w, pp = tf / v, (tb + tw) / v, tw / v, p * v
            idle = (pp / 2 - 1) * ((f + full) + full - 3 * w)
            assert [t.makespan - t.work(d) for d in range(p)] == pytest.approx([idle] * p)
            assert t.peak_activations == (pp + 1,) * p
            assert t.weight_copies == ((2.0,) * p if v == 1 else (1.0,) * p)


@pytest.mark.parametrize("name", ["dualpipe", "dualpipev"])
def test_dualpipe_pays_more_than_the_table_when_a_forward_outlasts_a_backward(name):
    # the table's idle assumes F <= B (a full backward at least as long as a forward); with
    # F > B the fused F&B ops wait on the forward chain: 2 (PP/2 - 1)(F - B) more
    p, v = 4, (2 if name == "dualpipev" else 1)
    t = simulate(schedule(name, p, 2 * p), 2.0, 1.0, 0.5)
    f, full, w, pp = 2.0 / v, 1.5 / v, 0.5 / v, p * v
    table = (pp / 2 - 1) * ((f + full) + full - 3 * w)
    assert t.makespan - t.work(0) == pytest.approx(table + 2 * (pp / 2 - 1) * (f - full))


def test_dualpipe_fused_op_waits_for_both_inputs():
    s = schedule("dualpipe", 4, 8)
    assert s.paired and all(s.ops[d][i].kind == "F" and s.ops[d][i + 1].kind in ("B", "BW")
                            for d in range(4) for i in s.paired[d])
    t = simulate(s, 1.0, 1.0, 1.0)
    for d in range(4):
        spans = t.spans(d)
        for i in s.paired[d]:  # the backward half runs right after its forward half
            assert spans[i + 1][1] == spans[i][2]


def test_async_schedules_run_the_1f1b_order_without_a_flush():
    one = schedule("1f1b", 4, 12)
    for name in ("pipedream", "2bw", "pipemare", "ampnet"):
        assert schedule(name, 4, 12).ops == one.ops


def test_simulate_keeps_its_keywords_and_takes_t_w():
    s = schedule("zb-h1", 4, 8)
    assert simulate(s, forward=1.0, backward=2.0).makespan == simulate(s, 1.0, 2.0).makespan
    # t_w given: B is the input-gradient part alone, W its own time
    t = simulate(s, 1.0, 1.0, 1.0)
    assert t.durations["B"] == 1.0 and t.durations["W"] == 1.0
    assert simulate(schedule("1f1b", 4, 8), 1.0, 1.0, 1.0).durations["B"] == 2.0
    with pytest.raises(ScheduleError, match="once"):
        simulate(s, 1.0, forward=1.0)


@pytest.mark.parametrize(("name", "p", "m", "words"), [
    ("chimera", 3, 6, "even"), ("chimera", 4, 6, "multiple of 4"), ("dualpipe", 4, 6, "2p"),
    ("dualpipev", 4, 7, "2p"), ("chimera", 34, 34, "32 stages")])
def test_zoo_bad_sizes_are_clear(name, p, m, words):
    with pytest.raises(ScheduleError, match=words):
        schedule(name, p, m)


def test_spmd_refuses_the_interleaved_order_instead_of_a_wrong_loss():
    # issue 32: spmd_check("interleaved", 4, 8) ran and gave a loss 1e-2 off
    with pytest.raises(ScheduleError, match="one-message buffer"):
        spmd.ticks(schedule("interleaved", 4, 8))
    for name in ("naive", "gpipe", "1f1b"):
        spmd.ticks(schedule(name, 4, 8))


# --- steps back to back (no flush between them: Qi et al.'s optimizer post-validation) ------
TIMES = [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (1.0, 2.0, 1.0), (2.0, 1.0, 1.0), (1.0, 1.5, 0.5)]


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("times", TIMES)
def test_zb_h2_steady_bubble_is_qi_et_als_p_minus_1_times_tf_tb_minus_2tw(p, times):
    # Qi et al. 2024, Table 2: ZB-H2's bubble (p-1)(T_F + T_B - 2 T_W), 0 at equal times;
    # its peak activations (2p-1) M_B on the first device
    tf, tb, tw = times
    m = 4 * p
    ss = steady_state(schedule("zb-h2", p, m), tf, tb, tw)
    idle = max(0.0, (p - 1) * (tf + tb - 2 * tw))
    assert ss.period == pytest.approx(m * (tf + tb + tw) + idle)
    assert ss.bubble_fraction == pytest.approx(idle / (m * (tf + tb + tw) + idle), abs=1e-12)
    assert max(simulate(schedule("zb-h2", p, m), tf, tb, tw).peak_activations) == 2 * p - 1


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("times", TIMES)
def test_1f1b_and_zb_h1_gain_nothing_from_overlapping_steps(p, times):
    # Qi et al. 2024, Table 2: 1F1B (p-1)(T_F+T_B+T_W), ZB-H1 (p-1)(T_F+T_B-T_W). Device 0's
    # first F and its last backward lie on one chain through every device, so the next step
    # cannot start earlier: the steady bubble is the flushed one.
    tf, tb, tw = times
    m = 2 * p
    for name, idle in (("1f1b", (p - 1) * (tf + tb + tw)), ("zb-h1", (p - 1) * (tf + tb - tw))):
        sched = schedule(name, p, m)
        flushed, ss = simulate(sched, tf, tb, tw), steady_state(sched, tf, tb, tw)
        assert ss.period == pytest.approx(m * (tf + tb + tw) + idle)
        assert ss.period == pytest.approx(flushed.makespan)
        assert ss.bubble_fraction == pytest.approx(flushed.bubble_fraction)


@pytest.mark.parametrize("name", ["pipedream", "2bw", "pipemare", "ampnet"])
def test_asynchronous_schedules_have_no_bubble_in_their_steady_state(name):
    # no flush at all (Narayanan et al. 2019): the steady state of 1F1B, bubble 0
    ss = steady_state(schedule(name, 4, 8), 1.0, 2.0)
    assert ss.bubble_fraction == pytest.approx(0.0, abs=1e-12) and ss.period == 8 * 3.0


def test_steady_state_checks_its_arguments_and_timeline_shortcut():
    with pytest.raises(ScheduleError, match="steps"):
        steady_state(schedule("1f1b", 2, 4), steps=2)
    t = simulate(schedule("zb-h2", 4, 8), 1.0, 1.0, 1.0)
    assert t.steady_bubble == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_zb_h2_steps_back_to_back_form_a_gap_free_parallelogram(p):
    # Qi et al. 2024, Fig. 3 / Sec. 2.2: device s starts s t_F late and ends s t_F late;
    # with the optimizer's post-validation the steps chain with no idle time in between
    m, steps = 2 * p, 4
    t = steady_state(schedule("zb-h2", p, m), 1.0, 1.0, 1.0, steps=steps).timeline
    for d in range(p):
        spans = t.spans(d)
        assert spans[0][1] == d and spans[-1][2] == d + steps * 3 * m
        assert all(b[1] == a[2] for a, b in itertools.pairwise(spans))


def test_chimera_and_dualpipe_gain_nothing_from_overlap_here():
    # Chimera and DualPipe(V) start and end every device's step on the dependency chain
    for name, m in (("chimera", 8), ("dualpipe", 8), ("dualpipev", 8)):
        times = (1.0, 1.0) if name == "chimera" else (1.0, 1.0, 1.0)
        sched = schedule(name, 4, m)
        assert steady_state(sched, *times).bubble_fraction == pytest.approx(
            simulate(sched, *times).bubble_fraction), name


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_zb_v_reaches_qi_et_al_zero_bubble_at_the_1f1b_peak(p, k):
    # Qi et al. 2024, Sec. 6: ZB-V idles 0 with t_F = t_B = t_W once steps overlap (optimizer
    # post-validation), holding at most 1F1B's peak: p full microbatches = 2p half-size chunks
    # per device, one copy of the weights. One flushed step can idle no less than the skew:
    # device s cannot start before s chunk ops, so the best is (p-1) / (6m + p-1) of the time
    m = k * p
    sched = schedule("zb-v", p, m)
    assert sorted(op for row in sched.ops for op in row) == sorted(
        (kind, i, c) for kind in "FBW" for i in range(m) for c in range(2 * p))
    t = simulate(sched, 1.0, 1.0, 1.0)  # raises if an op waited for one that never runs
    assert max(t.peak_activations) <= 2 * p and t.weight_copies == (1.0,) * p
    assert t.bubble_fraction == pytest.approx((p - 1) / (6 * m + p - 1), abs=1e-9)
    assert steady_state(sched, 1.0, 1.0, 1.0).bubble_fraction == pytest.approx(0.0, abs=1e-9)
    # every device works without a gap from s to s + 6m chunk ops (half a t_F each)
    for d in range(p):
        spans = t.spans(d)
        assert spans[0][1] == d / 2 and spans[-1][2] == (d + 6 * m) / 2
        assert all(b[1] == a[2] for a, b in itertools.pairwise(spans))


def test_zb_v_respects_the_v_and_needs_2p_minus_1_microbatches():
    sched = schedule("zb-v", 4, 7)  # the fewest: device 0 warms up with 2p-1 forwards
    for d, row in enumerate(sched.ops):
        assert {op.chunk for op in row} == {d, 7 - d}
    for row in sched.ops:  # a W after its B, a B after its F, on the same device
        seen = set()
        for op in row:
            before = {"F": None, "B": "F", "W": "B"}[op.kind]
            assert before is None or (before, op.microbatch, op.chunk) in seen, op
            seen.add(tuple(op))
    with pytest.raises(ScheduleError, match="2p-1 = 7"):
        schedule("zb-v", 4, 6)
