"""Sharded matmul: plans from the shardings, checked on the mesh and against the math."""

import numpy as np
import pytest
from checking import fails as _fails
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz import matmul
from tpviz.core import cost
from tpviz.errors import CheckFailed, ShardingError

MESH = {"X": 2, "Y": 4}
B, D, F = 16, 32, 64


@pytest.fixture(scope="module")
def mesh():
    return tpviz.make_mesh((2, 4), ("X", "Y"))


@pytest.fixture(scope="module")
def xw():
    rng = np.random.default_rng(1)
    return (rng.standard_normal((B, D), dtype=np.float32),
            rng.standard_normal((D, F), dtype=np.float32))


# (x spec, w spec, reduce_scatter) -> (case, y spec, [(kind, bytes per device, group)], flops)
CASES = [
    ("In[B_X, D]", "W1[D, F_Y]", False, 1, P("X", "Y"), [], 2 * (B // 2) * D * (F // 4)),
    ("In[B_X, D_Y]", "W1[D, F]", False, 2, P("X", None), [("all-gather", B // 2 * D * 4, 4)],
     2 * (B // 2) * D * F),
    ("In[B, D]", "W1[D_Y, F]", False, 2, P(None, None), [("all-gather", D * F * 4, 4)], 2 * B * D * F),
    ("In[B_X, D_Y]", "W1[D_Y, F]", False, 3, P("X", None), [("all-reduce", B // 2 * F * 4, 4)],
     2 * (B // 2) * (D // 4) * F),
    ("In[B_X, D_Y]", "W1[D_Y, F]", True, 3, P("X", "Y"), [("reduce-scatter", B // 2 * F // 4 * 4, 4)],
     2 * (B // 2) * (D // 4) * F),
    ("In[B, D_XY]", "W1[D_XY, F]", False, 3, P(None, None), [("all-reduce", B * F * 4, 8)],
     2 * B * (D // 8) * F),
    # case 2 where the axis that shards D in one operand shards B or F in the other (issue 27;
    # the Scaling Book's case 2): gather that operand along D, then multiply
    ("In[B_X, D]", "W1[D_X, F]", False, 2, P("X", None), [("all-gather", D * F * 4, 2)],
     2 * (B // 2) * D * F),  # FSDP's matmul: W1 gathered whole
    ("In[B, D_X]", "W1[D, F_X]", False, 2, P(None, "X"), [("all-gather", B * D * 4, 2)],
     2 * B * D * (F // 2)),
    ("In[B_X, D_Y]", "W1[D, F_Y]", False, 2, P("X", "Y"), [("all-gather", B // 2 * D * 4, 4)],
     2 * (B // 2) * D * (F // 4)),
]


@pytest.mark.parametrize(("xs", "ws", "rs", "case", "y_spec", "moves", "flops"), CASES)
def test_plan_from_the_math(xs, ws, rs, case, y_spec, moves, flops):
    p = matmul.plan((B, D), (D, F), xs, ws, MESH, reduce_scatter=rs)
    assert p.case == case and p.y_spec == y_spec and p.flops == flops
    assert [(c.kind, c.bytes, c.group_size) for c in p.collectives] == moves


@pytest.mark.parametrize(("xs", "ws", "rs", "case", "y_spec", "moves", "flops"), CASES)
def test_every_case_runs_and_compiles_to_the_plan(mesh, xw, xs, ws, rs, case, y_spec, moves, flops):
    x, w = xw
    p = matmul.plan(x.shape, w.shape, xs, ws, dict(mesh.shape), reduce_scatter=rs)
    result = matmul.check(p, mesh, x, w)  # raises if values or collectives differ
    assert result.max_error < 1e-5
    assert [(c.kind, c.bytes, c.group_size) for c in result.explicit] == moves


def test_check_catches_a_plan_that_lies(mesh, xw):
    x, w = xw
    p = matmul.plan(x.shape, w.shape, "In[B_X, D_Y]", "W1[D_Y, F]", MESH)
    wrong = matmul.MatmulPlan(**{**p.__dict__, "collectives": ()})  # claims: no communication
    with pytest.raises(CheckFailed, match="the plan says"):
        matmul.check(wrong, mesh, x, w)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "xs", "ws", "words"),
    [((16, 32), (16, 64), "In[B, D]", "W1[D, F]", "inner dimensions differ"),
     ((16, 30), (30, 64), "In[B, D_Y]", "W1[D_Y, F]", "does not divide into 4"),
     ((16, 32), (32, 64), "In[B_X, D]", "W1[D, F_X]", "case 4"),
     ((16, 32), (32, 64), "In[B, D_X]", "W1[D_Y, F]", "same axes"),
     ((16, 32, 2), (32, 64), "In[B, D, E]", "W1[D, F]", "must be matrices")],
)
def test_bad_input(x_shape, w_shape, xs, ws, words):
    with pytest.raises(ShardingError, match=words):
        matmul.plan(x_shape, w_shape, xs, ws, MESH)


def test_reduce_scatter_only_in_case_3():
    with pytest.raises(ShardingError, match="case 3 only"):
        matmul.plan((B, D), (D, F), "In[B_X, D]", "W1[D, F]", MESH, reduce_scatter=True)


def test_cost_model_crossover_from_the_formula():
    # case 3 in bf16 on N devices: compute 2BDF/(NC), all-reduce 2 * 2BF / W -> balance at D/N = 2C/W
    system = cost.SYSTEMS["TPU v5p (ICI)"]
    n, b, f = 8, 4096, 4096
    balance = 2 * system.flops / system.bandwidth * n
    for d, bound in [(int(balance * 0.5) // 64 * 64, "communication"),
                     (int(balance * 2) // 64 * 64, "compute")]:
        p = matmul.plan((b, d), (d, f), "In[B, D_X]", "W1[D_X, F]", {"X": n}, dtype="bf16")
        e = cost.estimate(p.flops, p.collectives, system)
        assert e.compute_s == pytest.approx(2 * b * d * f / n / system.flops)
        # a bidirectional ring with wraparound: 2 (n-1)/n V / W, and n/2 hops of 1 µs twice
        assert e.comm_s == pytest.approx(2 * (n - 1) / n * 2 * b * f / system.bandwidth
                                         + 2 * (n // 2) * 1e-6)
        assert e.bound == bound
        assert e.overlapped_s == max(e.compute_s, e.comm_s)


def test_all_gather_costs_the_ring_time():
    p = matmul.plan((1024, 4096), (4096, 4096), "In[B, D_X]", "W1[D, F]", {"X": 8}, dtype="bf16")
    (gather,) = p.collectives
    assert gather.full_bytes == 1024 * 4096 * 2
    # a ring: 7 steps, each device sends 7/8 of the gathered array
    assert gather.time(1e11, latency=1e-6) == pytest.approx(7e-6 + 7 / 8 * 1024 * 4096 * 2 / 1e11)


def test_matmul_drawing_shows_all_three_arrays():
    p = matmul.plan((B, D), (D, F), "In[B_X, D_Y]", "W1[D_Y, F]", MESH)
    fig = tpviz.matmul.draw.figure(p, system=cost.SYSTEMS["H100 (NVLink)"])
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["In[B_X, D_Y]", "W1[D_Y, F]", "Out[B_X, F]"]
    assert "all-reduce" in fig._suptitle.get_text() and "bound" in fig._suptitle.get_text()


def test_explore_matmul_renders_and_compiles():
    from tpviz.matmul.explore import render_matmul

    fig = render_matmul("X=2, Y=4", "In[B_X, D_Y]", "W1[D_Y, F]", 256, 512, 256, "TPU v5e (ICI)",
                        True, True)
    assert any("reduce-scatter" in t.get_text() for t in fig.texts)
    assert "application/vnd.jupyter.widget-view+json" in tpviz.explore_matmul()._repr_mimebundle_()


def test_explorer_accepts_case_2_with_the_axis_on_b_or_f():  # issue 27: FSDP's matmul
    from tpviz.matmul.explore import CASES, matmul_rows, render_matmul

    fig = render_matmul("X=2, Y=4", "In[B_X, D]", "W1[D_X, F]", 256, 512, 256, "TPU v5e (ICI)",
                        False, True)
    assert any("all-gather" in t.get_text() for t in fig.texts)
    rows = matmul_rows("In[B_X, D] · W1[D_X, F] (FSDP)", 256, 256, 256, "TPU v5e (ICI)", False)
    assert "case 2" in str(rows) and "In[B_X, D] (FSDP)" not in CASES
    # each label plans the layouts it names (the gather case gathers In along D; W1 is whole)
    for label, (x, w) in CASES.items():
        assert label.startswith(f"{x} · {w}")


# --- the chapter's new checkers: the right answer, plausible wrong answers, the stub -----------


def test_latency_crossover_checker(capsys):
    n, alpha, w = 16, 2e-6, 4.5e11
    # 2(N-1) α = 2(N-1)/N · V / W  ⇔  V = N α W
    tpviz.exercises.check_latency_crossover(n * alpha * w)
    assert "✓" in capsys.readouterr().out
    check = tpviz.exercises.check_latency_crossover
    _fails(check, (n - 1) * alpha * w, words="2V/W")
    _fails(check, alpha * w, words="one step of latency")
    _fails(check, 2 * (n - 1) * alpha * w, words="not right")
    check(...)
    assert "not attempted" in capsys.readouterr().out


def test_matmul_design_checker(capsys):
    mib = 2**20
    # In[B_X, D] · W1[D, F_Y] on {X: 2, Y: 4}: blocks [4096, 8192], [8192, 8192], [4096, 8192]
    # in bf16 = 64 + 128 + 64 MiB; 2 · 4096 · 8192 · 8192 FLOPs at 1.97e14 FLOP/s, no collective
    ms = 2 * 4096 * 8192 * 8192 / 1.97e14 * 1e3
    tpviz.exercises.check_matmul_design("In[B_X, D]", "W1[D, F_Y]", 256 * mib, ms)
    assert "✓" in capsys.readouterr().out
    check = tpviz.exercises.check_matmul_design
    # W1 whole on every device: 16 + 512 + 64 MiB
    _fails(check, "In[B_XY, D]", "W1[D, F]", 592 * mib, ms, words="over the 256 MiB")
    # case 3 over Y: 16 + 128 + an all-reduced Out[B_X, F] of 256 MiB; Y is a line of 4 on a
    # v5e (no wraparound below 16): 2 · (3/4) · V over one link of 4.5e10 B/s, 6 hops of 1 µs
    _fails(check, "In[B_X, D_Y]", "W1[D_Y, F]", 400 * mib,
           (2 * 3 / 4 * 4096 * 32768 * 2 / 4.5e10 + 6e-6) * 1e3, words="over the 256 MiB")
    _fails(check, "In[B_X, D]", "W1[D, F_Y]", 192 * mib, ms, words="bytes per device")
    _fails(check, "In[B_X, D]", "W1[D, F_Y]", 256 * mib, 1.1 * ms, words="your time in ms")
    _fails(check, "In[B_X, D]", "W1[D, F_X]", 256 * mib, ms, words="not a valid plan")
    # In whole, W1 over Y only: 128 + 128 + an Out[B, F_Y] of 128 MiB
    _fails(check, "In[B, D]", "W1[D, F_Y]", 384 * mib, 2 * ms, words="over the 256 MiB")


def test_matmul_design_admits_more_than_one_answer(capsys):
    """Issue 39, gap 4: other pairs of layouts meet both budgets and pass."""
    mib, check = 2**20, tpviz.exercises.check_matmul_design
    compute = 2 * 8192 * 8192 * 4096 / 1.97e14  # every design's FLOPs per chip, / R of v5e
    # In whole, W1 over all 8 chips: 128 + [8192, 4096] 64 + Out[B, F_XY] 64 MiB, nothing moves
    check("In[B, D]", "W1[D, F_XY]", 256 * mib, compute * 1e3)
    assert "✓" in capsys.readouterr().out
    # case 3 over X, F over Y: 64 + 64 MiB of blocks and a partial Out[B, F_Y] of 128 MiB,
    # all-reduced over X, a line of 2: 2 · (1/2) · 128 MiB over one 4.5e10 B/s link, 2 hops of
    # 1 µs; the larger of it and the compute
    reduce = 2 * (1 / 2) * 128 * mib / 4.5e10 + 2e-6
    check("In[B, D_X]", "W1[D_X, F_Y]", 256 * mib, max(compute, reduce) * 1e3)
    assert "✓" in capsys.readouterr().out
