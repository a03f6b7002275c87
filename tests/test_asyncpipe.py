"""Chapter 8: the formula table, the staleness runs, the explorer and the checkers."""

import numpy as np
import pytest
from checking import fails, passes, stub

import tpviz.exercises as ex
from tpviz.asyncpipe import explore, formulas
from tpviz.asyncpipe import stale as train
from tpviz.core import live


def test_table_matches_the_papers_where_they_give_a_number():
    rows = {r.name: r for r in formulas.table(4, 8)}
    for name in ("1f1b", "zb-h1", "chimera", "dualpipe", "dualpipev", "pipedream", "2bw",
                 "pipemare", "ampnet"):
        assert rows[name].bubble == pytest.approx(rows[name].bubble_paper), name
    assert rows["pipedream"].weight_copies == (4, 3, 2, 1)
    assert rows["2bw"].staleness == (1, 1, 1, 1)
    # ZB-H2: Qi et al.'s (p-1)(t_F+t_B-2t_W) = 0 once steps overlap; 11.1 % in one step
    assert rows["zb-h2"].steady == pytest.approx(rows["zb-h2"].bubble_paper, abs=1e-12)
    assert rows["zb-h2"].bubble == pytest.approx(3 / 27)
    for name in ("1f1b", "zb-h1", "chimera", "dualpipe", "dualpipev"):  # nothing to overlap
        assert rows[name].steady == pytest.approx(rows[name].bubble), name
    for name in ("pipedream", "2bw", "pipemare", "ampnet"):  # no flush at all
        assert rows[name].steady == pytest.approx(0.0, abs=1e-12), name


def test_versions_come_from_the_simulated_timeline():
    fwd, bwd, per_update = train.versions("pipedream", 12)
    assert per_update == 1
    # microbatch i's forward on stage s reads version i - (p - 1 - s) in the steady state
    assert list(fwd[8]) == [5, 6, 7, 8] and (bwd == fwd).all()  # stashed
    fwd, bwd, _ = train.versions("pipemare", 12)
    assert list(bwd[8]) == [8, 8, 8, 8]  # the newest: no stash
    fwd, bwd, per_update = train.versions("2bw", 16)
    assert per_update == 4 and list(fwd[9]) == [1, 1, 1, 1]  # batch 2 reads W(1)


def test_2bw_update_rule_on_real_arrays():
    w0 = np.arange(4.0)
    seen = []

    def grad(w):
        seen.append(w.copy())
        return w * 0.5

    out = train_two_bw(w0, grad, 0.1, 3)
    # W(1) = W(0) - lr g(W(0)); W(2) = W(1) - lr g(W(0)); W(3) = W(2) - lr g(W(1))
    np.testing.assert_allclose(out[1], w0 - 0.05 * w0)
    np.testing.assert_allclose(out[2], out[1] - 0.05 * w0)
    np.testing.assert_allclose(out[3], out[2] - 0.05 * out[1])


def train_two_bw(w0, grad, lr, steps):  # the chapter's solution of Exercise 8.4
    prev = cur = w0
    out = [w0]
    for _ in range(steps):
        prev, cur = cur, cur - lr * grad(prev)
        out.append(cur)
    return out


@pytest.fixture(scope="module")
def runs():
    return train.train(steps=200)


def test_staleness_runs_are_deterministic_and_in_order(runs):
    small, large = runs[0.05], runs[0.2]
    for curves in (small, large):
        assert all(np.isfinite(c.losses).all() for c in curves.values())
    # small steps: staleness costs little (each run within 2x of its synchronous counterpart)
    sync, flush = small["synchronous"].final, small["synchronous, 4 per update"].final
    for label in ("PipeDream", "AMPNet = PipeMare, no fixes", "PipeMare + both fixes"):
        assert sync < small[label].final < 2 * sync, label
    assert flush < small["2BW"].final < 2 * flush
    # large steps: the synchronous runs still learn, every stale one is far behind
    assert large["synchronous"].final < 0.2 and large["synchronous, 4 per update"].final < 0.2
    for label in ("PipeDream", "2BW", "AMPNet = PipeMare, no fixes", "PipeMare + both fixes",
                  "PipeMare + LR rescheduling"):
        assert large[label].final > 3 * large["synchronous"].final, label
    # stashing beats no stash; 2BW (one update behind, with momentum) is the worst here
    assert large["PipeDream"].final < large["AMPNet = PipeMare, no fixes"].final
    assert large["2BW"].final == max(c.final for c in large.values())


@pytest.mark.slow
def test_a_run_alone_repeats_its_curve(runs):
    # seeded: the same run alone gives the same curve (to float32 rounding of the batched
    # matmuls)
    again = train.train(labels=("PipeDream",), steps=200, lrs=(0.2,))
    np.testing.assert_allclose(again[0.2]["PipeDream"].losses, runs[0.2]["PipeDream"].losses,
                               rtol=1e-4)


def test_live_figure_rows_are_the_plan():
    rows = explore.zoo_rows("pipedream", 4, 8, True)
    ops = [r for r in rows if "device" in r]
    assert len(ops) == 2 * 4 * 8
    assert "staleness per stage [3, 2, 1, 0]" in rows[-1]["note"]
    assert len(explore.LIVE.settings()) <= live.MAX_SETTINGS


def test_staleness_checker(capsys):
    passes(ex.check_staleness, [5, 4, 3, 2, 1, 0], capsys=capsys)
    fails(ex.check_staleness, [6, 5, 4, 3, 2, 1], words="stashes")
    fails(ex.check_staleness, [0, 1, 2, 3, 4, 5], words="reversed")
    stub(ex.check_staleness, ..., capsys=capsys)


def test_weight_memory_checker(capsys):
    passes(ex.check_weight_memory, 36, 16, capsys=capsys)
    fails(ex.check_weight_memory, 64, 16, words="p versions")
    fails(ex.check_weight_memory, 36, 8, words="double-buffers")


def _chimera_solution(p):
    from tpviz.pipeline import schedule

    return [[tuple(op) for op in ops] for ops in schedule("chimera", p, p).ops]


def test_chimera_checker(capsys):
    passes(ex.check_chimera, _chimera_solution, capsys=capsys)
    # one pipeline only
    fails(ex.check_chimera, lambda p: [[(k, i, d) for k in "FB" for i in range(p)]
                                       for d in range(p)], words="one pipeline")
    # GPipe-like: every forward first, then every backward (valid, bubble too large)
    def gpipe_like(p):
        good = _chimera_solution(p)
        return [[o for o in ops if o[0] == "F"] + [o for o in ops if o[0] == "B"]
                for ops in good]
    fails(ex.check_chimera, gpipe_like, words="bubble")
    # backwards before forwards: deadlocks
    fails(ex.check_chimera, lambda p: [list(reversed(ops)) for ops in _chimera_solution(p)],
          words="deadlocks")
    fails(ex.check_chimera, lambda p: [[("F", 0, 0)]], words="F and B|lists")


def test_two_bw_checker(capsys):
    passes(ex.check_two_bw, train_two_bw, capsys=capsys)

    def sgd(w0, grad, lr, steps):
        out = [w0]
        for _ in range(steps):
            out.append(out[-1] - lr * grad(out[-1]))
        return out

    def two_behind(w0, grad, lr, steps):
        out = [w0, w0 - lr * grad(w0)]
        for t in range(1, steps):
            out.append(out[t] - lr * grad(out[max(t - 2, 0)]))
        return out

    def nan(w0, grad, lr, steps):
        return [w0 * np.nan] * (steps + 1)

    fails(ex.check_two_bw, sgd, words="plain SGD")
    fails(ex.check_two_bw, two_behind, words="differs")
    fails(ex.check_two_bw, nan, words="NaN")
    fails(ex.check_two_bw, lambda w0, grad, lr, steps: [w0], words="list")


def test_memory_cap_checker(capsys):
    passes(ex.check_memory_cap, "zb-v", capsys=capsys)
    fails(ex.check_memory_cap, "dualpipe", words="weights")
    fails(ex.check_memory_cap, "zb-h2", words="activations")
    fails(ex.check_memory_cap, "1f1b", words="idles less")
    fails(ex.check_memory_cap, "pipedream", words="asynchronous")


def test_dualpipe_idle_checker(capsys):
    passes(ex.check_dualpipe_idle, 6, 21, capsys=capsys)
    fails(ex.check_dualpipe_idle, 15, 21, words="3W")
    fails(ex.check_dualpipe_idle, 6, 14, words="full backward")


@pytest.mark.slow
def test_explore_zoo_draws_and_refuses_bad_settings_clearly():
    import tpviz

    bundle = tpviz.explore_zoo(name="dualpipe", stages=4, microbatches=8)._repr_mimebundle_()
    assert bundle
    from tpviz.core import live as core_live

    table, _ = core_live.table(explore.LIVE)
    assert any("2p" in r.get("note", "") for r in table)  # dualpipe p=8, m=8 refused, said why
