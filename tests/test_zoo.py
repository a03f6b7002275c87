"""Chapter 8's schedule zoo: bubble, staleness and weight copies against each paper's formula."""

import itertools

import pytest

from tpviz.errors import ScheduleError
from tpviz.pipeline import schedule, simulate, spmd, steady_state, zoo


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


def dualpipe_idle(pp: int, f: float, b_in: float, w: float) -> float:
    """Idle time per device and step of DualPipe with PP stages: DeepSeek's table
    (PP/2 - 1)(F&B + B - 3W), B = b_in + w a full backward and F&B = F + B (ideal devices
    overlap no compute), plus what its op order adds where a forward or a weight gradient
    outlasts the input gradient b_in, less what the middle ranks save by running their first
    F and B apart (chapter 8's closed form, checked there over 1,600 points)."""
    k, full = pp / 2 - 1, b_in + w
    table = k * ((f + full) + full - 3 * w)
    return table + k * (max(0.0, f - b_in) + max(0.0, w - b_in)) - min(f, k * max(0.0, b_in - f))


@pytest.mark.parametrize("p", [4, 8])
def test_dualpipe_memory_and_bubble_match_deepseeks_table(p):
    # deepseek-ai/DualPipe README (DeepSeek-AI 2024): PP stages; parameters 2x, activations
    # PP + 1 per device; bubble (PP/2 - 1)(F&B + B - 3W). Exactly the table where the input
    # gradient B - W is as long as a forward and no shorter than W (DeepSeek's B = 2F, W = F)
    for tf, tb, tw in [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (0.5, 0.5, 0.5), (2.0, 2.0, 1.0)]:
        for name, v in (("dualpipe", 1), ("dualpipev", 2)):  # DualPipeV: PP = 2p half stages
            t = simulate(schedule(name, p, 2 * p), tf, tb, tw)
            f, full, w, pp = tf / v, (tb + tw) / v, tw / v, p * v
            idle = (pp / 2 - 1) * ((f + full) + full - 3 * w)
            assert [t.makespan - t.work(d) for d in range(p)] == pytest.approx([idle] * p)
            assert t.peak_activations == (pp + 1,) * p
            assert t.weight_copies == ((2.0,) * p if v == 1 else (1.0,) * p)


@pytest.mark.parametrize("name", ["dualpipe", "dualpipev"])
def test_dualpipe_idle_beside_the_table_where_f_or_w_outlast_the_input_gradient(name):
    # the points: (F, B, W) = (1, 1, 0.5) at PP = 4: table 1.5, op order 2; (1, 1.5, 1)
    # at PP = 8: table 3, op order 6 (B a full backward; the simulator takes B - W)
    v = 2 if name == "dualpipev" else 1
    for pp, (f, full, w), table, found in ((4, (1, 1, 0.5), 1.5, 2.0), (8, (1, 1.5, 1), 3, 6)):
        t = simulate(schedule(name, pp // v, 2 * pp), f * v, (full - w) * v, w * v)
        assert dualpipe_idle(pp, f, full - w, w) == pytest.approx(found)
        assert (pp / 2 - 1) * ((f + full) + full - 3 * w) == pytest.approx(table)
        assert t.makespan - t.work(0) == pytest.approx(found)
    # over a grid of 48 points per schedule: F > B - W, W > B - W, and the middle ranks' saving
    for p, f, b_in, w in itertools.product((4, 8), (0.5, 1.0, 2.0), (0.5, 1.0), (0.25, 1.0, 2.0)):
        pp = p * v
        t = simulate(schedule(name, p, 2 * pp), f, b_in, w)
        assert t.makespan - t.work(0) == pytest.approx(dualpipe_idle(pp, f / v, b_in / v,
                                                                     w / v)), (p, f, b_in, w)


def test_dualpipe_order_against_a_second_transcription_of_deepseeks_code():
    # tests/dualpipe_reference.py reads DeepSeek's step() afresh (receives, sends, commits):
    # with ideal communication it gives the simulator's idle time at every setting
    import dualpipe_reference as ref

    grid = (0.25, 1.0, 2.0)
    extra = {}
    for v, p in ((False, 4), (False, 6), (True, 2), (True, 3)):
        name, m = ("dualpipev", 2 * p) if v else ("dualpipe", 2 * p)
        for tf, tb, tw in itertools.product(grid, repeat=3):
            t = simulate(schedule(name, p, m), tf, tb, tw)
            k = 0.5 if v else 1.0  # DualPipeV's ops are half-size stages: times per chunk
            ideal = ref.idle(v, p, m, tf * k, tb * k, tw * k)
            assert t.makespan - t.work(0) == pytest.approx(ideal, abs=1e-9), (name, p, tf, tb)
            # the code's own communication (receives waited on together, one op ahead; some
            # sends one op late) costs nothing more while forwards are not longer than t_B
            code = ref.idle(v, p, m, tf * k, tb * k, tw * k, comm="code")
            if tf <= tb:
                assert code == pytest.approx(ideal, abs=1e-9), (name, p, tf, tb, tw)
            extra[name, p, tf, tb, tw] = code - ideal
    assert min(extra.values()) > -1e-9 and max(extra.values()) > 1.0  # chapter 8 says so


def test_dualpipe_middle_ranks_run_their_first_f_and_b_apart():
    # DualPipe.step, step 4, i == 0: "We don't overlap these two chunks to further reduce
    # bubble size" on the middle ranks (DualPipeV: the last rank); every other pair of steps
    # 4 and 5 is one _forward_backward_chunk
    for name, p, m in (("dualpipe", 8, 16), ("dualpipe", 4, 12), ("dualpipev", 4, 8)):
        s = schedule(name, p, m)
        ranks, count = (p, m) if name == "dualpipev" else (p // 2, m // 2)
        for d in range(p):
            h = d if name == "dualpipev" else min(d, p - 1 - d)
            pairs = 2 * (count - 2 * ranks + h + 1) + (ranks - h - 1)
            assert len(s.paired[d]) == pairs - (h == ranks - 1), (name, d)


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


@pytest.mark.parametrize("p", [4, 6])
def test_zb_h1_and_zb_h2_idle_in_one_flushed_step(p):
    # Qi et al. 2024 give ZB-H1 (p-1)(t_F+t_B-t_W) and ZB-H2 (p-1)(t_F+t_B-2t_W), derived at
    # t_F = t_B = t_W. One flushed step of these op orders cannot beat the forward skew
    # (p-1)t_F nor, ZB-H1, the backward skew (p-1)t_B; ZB-H2's deeper warm-up (2(p-d)-1
    # forwards, built for t_F = t_B) waits (p-1)(t_B - t_F) more when backwards are longer
    for tf, tb, tw in itertools.product((0.5, 1.0, 2.0), repeat=3):
        h1 = simulate(schedule("zb-h1", p, 2 * p), tf, tb, tw)
        h2 = simulate(schedule("zb-h2", p, 2 * p), tf, tb, tw)
        assert h1.makespan - h1.work(0) == pytest.approx((p - 1) * max(tf + tb - tw, tf, tb))
        assert h2.makespan - h2.work(0) == pytest.approx(
            (p - 1) * max(tf + tb - 2 * tw, tf, tb - tf))
    # the points, p = 4: flushed ZB-H2 already idles the paper's 3 where ZB-H1 idles
    # the paper's 4.5 and 6
    for (tf, tb, tw), h1_paper in (((1, 1, 0.5), 4.5), ((1, 2, 1), 6.0)):
        h1 = simulate(schedule("zb-h1", 4, 8), tf, tb, tw)
        h2 = simulate(schedule("zb-h2", 4, 8), tf, tb, tw)
        assert h2.makespan - h2.work(0) == pytest.approx(3 * (tf + tb - 2 * tw)) == 3.0
        assert h1.makespan - h1.work(0) == pytest.approx(h1_paper)


@pytest.mark.parametrize("p", [4, 6])
def test_zb_h2_overlapping_steps_reach_qi_et_al_where_backwards_are_not_longer(p):
    # steps back to back: (p-1) max(t_F+t_B-2t_W, t_B-t_F, 0); Qi et al.'s value wherever
    # t_B <= t_F or t_W <= t_F
    for tf, tb, tw in itertools.product((0.5, 1.0, 2.0), repeat=3):
        ss = steady_state(schedule("zb-h2", p, 3 * p), tf, tb, tw)
        idle = ss.period - ss.work / p
        assert idle == pytest.approx((p - 1) * max(tf + tb - 2 * tw, tb - tf, 0.0), abs=1e-9)
        if tb <= tf or tw <= tf:
            assert idle == pytest.approx((p - 1) * max(0.0, tf + tb - 2 * tw), abs=1e-9)


def test_chimera_concatenated_units_pay_intermediate_bubbles_when_tb_exceeds_tf():
    # Li & Hoefler's (p-2)/(2m+p-2): p - 2 idle slots per step for any number of units at
    # t_F = t_B; at t_B = 2 t_F a backward fills two forward slots, and each concatenated
    # unit leaves gaps: the idle time grows with m, past 1F1B's (p-1)(t_F+t_B)
    p = 8
    idle = {}
    for m in (8, 16, 24, 32):
        assert simulate(schedule("chimera", p, m), 1.0, 1.0).makespan == pytest.approx(
            2 * m + p - 2)
        t = simulate(schedule("chimera", p, m), 1.0, 2.0)
        idle[m] = t.makespan - t.work(0)
        # every device runs m forwards and m backwards (two stages, m/2 microbatches each)
        assert t.work(0) == pytest.approx(3 * m)
        ref = _reference_makespan(schedule("chimera", p, m), [1.0] * p)
        assert idle[m] == pytest.approx(ref - 3 * m)
    assert idle[8] < (p - 1) * 3 < idle[32]
    assert idle[8] < idle[16] < idle[24] < idle[32]
    assert [idle[m] for m in idle] == pytest.approx([12, 17, 23, 29])  # chapter 8's figures


def test_stage_costs_scale_each_devices_ops():
    # uniform costs c: every time c times as long
    base = simulate(schedule("1f1b", 4, 8), 1.0, 2.0)
    twice = simulate(schedule("1f1b", 4, 8), 1.0, 2.0, stage_costs=[2, 2, 2, 2])
    assert twice.makespan == pytest.approx(2 * base.makespan)
    assert twice.bubble_fraction == pytest.approx(base.bubble_fraction)
    assert twice.work(1) == pytest.approx(2 * base.work(1))
    # the naive schedule runs one op at a time: m (t_F + t_B) sum_s c_s
    naive = simulate(schedule("naive", 4, 3), 1.0, 2.0, stage_costs=[6, 3, 3, 4])
    assert naive.makespan == pytest.approx(3 * 3 * 16)
    # 1F1B against a reference event simulation written here (stage s: F c_s, B 2 c_s)
    gains = []
    for m in (4, 8, 16, 64):
        s = schedule("1f1b", 4, m)
        for costs in ([6, 3, 3, 4], [5, 4, 3, 4]):
            t = simulate(s, 1.0, 2.0, stage_costs=costs)
            assert t.makespan == pytest.approx(_reference_makespan(s, costs))
        gains.append(_reference_makespan(s, [6, 3, 3, 4]) / _reference_makespan(s, [5, 4, 3, 4]))
    # chapter 8's stage-balance answer: moving one unit from stage 0 to stage 1
    assert [round(g, 2) for g in gains] == [1.00, 1.11, 1.15, 1.19]
    with pytest.raises(ScheduleError, match="one cost per device"):
        simulate(schedule("1f1b", 4, 8), stage_costs=[1, 2])
    with pytest.raises(ValueError, match="stage_costs"):
        simulate(schedule("1f1b", 4, 8), stage_costs=[1, 2, 0, 1])


def _reference_makespan(sched, costs, t_b=2.0):
    """Each device runs its ops in order, each as soon as its input is there."""
    p, end, free, nxt = sched.stages, {}, [0.0] * sched.stages, [0] * sched.stages
    while any(nxt[d] < len(sched.ops[d]) for d in range(p)):
        for d in range(p):
            while nxt[d] < len(sched.ops[d]):
                kind, i, c = sched.ops[d][nxt[d]]
                dep = (("F", i, c - 1) if c else None) if kind == "F" else (
                    ("B", i, c + 1) if c < p - 1 else ("F", i, c))
                if dep is not None and dep not in end:
                    break
                start = max(free[d], end.get(dep, 0.0))
                free[d] = end[kind, i, c] = start + costs[d] * (1.0 if kind == "F" else t_b)
                nxt[d] += 1
    return max(free)


def test_chimera_rebuilt_for_longer_backwards_trades_activations_for_idle_time():
    from tpviz.pipeline.plan import chimera

    assert chimera(8, 16).ops == schedule("chimera", 8, 16).ops  # 1 tick: the paper's order
    for m in (24, 32):
        paper = simulate(schedule("chimera", 8, m), 1.0, 2.0)
        rebuilt = simulate(chimera(8, m, backward_ticks=2), 1.0, 2.0)
        assert sorted(map(sorted, rebuilt.schedule.ops)) == sorted(map(sorted, paper.schedule.ops))
        assert rebuilt.makespan - rebuilt.work(0) < paper.makespan - paper.work(0)
        assert max(rebuilt.peak_activations) > max(paper.peak_activations) == 8
    with pytest.raises(ScheduleError, match="backward_ticks"):
        chimera(8, 16, backward_ticks=5)


def test_build_refuses_a_name_outside_the_zoo():
    # zoo.build("1f1b", ...) used to fall through to DualPipe's order
    with pytest.raises(ScheduleError, match="not a schedule of chapter 8's zoo"):
        zoo.build("1f1b", 4, 8)
