"""Chapter 13's PyTorch runs: each equals one process; torch's schedules against tpviz's;
FSDP2's shards and collectives against tpviz.zero; DTensor's collectives against Megatron's f
and g; the workers under torchrun. Expected values come from one-process runs and the math."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpviz.errors import ArgumentError
from tpviz.pipeline import schedule
from tpviz.pipeline.plan import Op

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[1]


# ---- plan level (no processes) ------------------------------------------------------------

def test_parse_reads_torchs_actions():
    from tpviz.pytorch.plan import parse
    assert parse("4F0") == [Op("F", 0, 4)]
    assert parse("7I3") == [Op("B", 3, 7)]  # the input-gradient half: tpviz's B
    assert parse("7W3") == [Op("W", 3, 7)]
    assert parse("(0F7;7B3)OVERLAP_F_B") == [Op("F", 7, 0), Op("B", 3, 7)]
    assert parse("0SEND_F1") == [] and parse("3REDUCE_GRAD") == []


def test_compare_finds_equal_and_different_orders():
    from tpviz.pytorch.plan import compare
    ours = schedule("1f1b", 2, 3).ops
    as_torch = {r: [None] + [f"{c}{k}{mb}" for k, mb, c in ops] for r, ops in enumerate(ours)}
    assert compare("Schedule1F1B", as_torch, 3).equal
    swapped = {0: as_torch[0][:1] + as_torch[0][2:3] + as_torch[0][1:2] + as_torch[0][3:],
               1: as_torch[1]}
    c = compare("Schedule1F1B", swapped, 3)
    assert not c.equal and c.first_difference == (0, None)
    with pytest.raises(ArgumentError, match="ScheduleGPipe"):
        compare("ScheduleNope", as_torch, 3)


@pytest.mark.parametrize(("torch_name", "own"), [("ScheduleZBVZeroBubble", "zb-v"),
                                                  ("ScheduleDualPipeV", "dualpipev")])
def test_compare_maps_torchs_v_schedules_to_the_zoo_directly(torch_name, own):
    from tpviz.pytorch.plan import compare
    ours = schedule(own, 2, 4).ops
    as_torch = {r: [f"{c}{'B' if k == 'BW' else k}{mb}" for k, mb, c in ops]
                for r, ops in enumerate(ours)}
    c = compare(torch_name, as_torch, 4)
    assert c.exact and c.tpviz_name == own and c.equal


def test_fsdp_plan_is_zero_stage_3():
    from tpviz.pytorch.plan import fsdp_plan
    # 3 Linear(16, 16): 3 * 272 parameters of 4 bytes over 4 ranks
    assert fsdp_plan(816, 4, 3, True) == {"param_bytes": 816.0, "all-gather": 6,
                                         "reduce-scatter": 3}
    assert fsdp_plan(816, 4, 3, False)["all-gather"] == 3
    assert fsdp_plan(816, 4, 3, True, param_bytes=8)["param_bytes"] == 816 * 8 / 4


def test_bubble_is_the_share_of_time_outside_compute():
    from tpviz.pytorch.plan import bubble
    # taking turns: each rank computes half the time
    assert bubble([[("F", 0, 0.0, 1.0)], [("F", 0, 1.0, 2.0)]]) == pytest.approx(0.5)
    # both busy all the time
    assert bubble([[("F", 0, 0.0, 2.0)], [("F", 0, 0.0, 2.0)]]) == pytest.approx(0.0)
    # GPipe, 2 stages, 2 chunks of equal F = 1, B = 2: (p-1)/(m+p-1) = 1/3
    r0 = [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 0, 5, 7), ("B", 1, 7, 9)]
    r1 = [("F", 0, 1, 2), ("F", 1, 2, 3), ("B", 0, 3, 5), ("B", 1, 5, 7)]
    assert bubble([r0, r1]) == pytest.approx(1 / 3)


def test_gantt_draws_the_recorded_starts_and_ends():
    from tpviz.pytorch import draw
    spans = [[("F", 0, 10.000, 10.002), ("F", 1, 10.002, 10.007), ("B", 0, 10.011, 10.012)],
             [("F", 0, 10.003, 10.004), ("B", 0, 10.004, 10.010)]]
    fig = draw.gantt(spans)
    (boxes,) = [c for c in fig.axes[0].collections]
    drawn = sorted((round(p.vertices[:, 0].min(), 6), round(p.vertices[:, 0].max(), 6))
                   for p in boxes.get_paths())
    # in ms from the first start; each op its own length (not one length per kind)
    assert drawn == sorted((round(1000 * (a - 10), 6), round(1000 * (b - 10), 6))
                           for rank in spans for _, _, a, b in rank)


def test_torch_orders_without_processes_match_tpviz():
    from tpviz.pytorch.orders import torch_order
    from tpviz.pytorch.plan import compare
    # tpviz's schedules are the reference: these torch classes declare the very same orders
    for name, p, m in (("ScheduleGPipe", 2, 3), ("ScheduleGPipe", 8, 16),
                       ("ScheduleInterleaved1F1B", 2, 4), ("ScheduleInterleaved1F1B", 4, 12),
                       ("ScheduleDualPipeV", 2, 4), ("ScheduleDualPipeV", 4, 16)):
        c = compare(name, torch_order(name, p, m), m)
        assert c.equal, (name, p, m, c.explanation)
    # 1F1B's declared order is off on the last rank only (its own loop runs tpviz's 1F1B)
    c = compare("Schedule1F1B", torch_order("Schedule1F1B", 4, 8), 8)
    assert c.first_difference == (None, None, None, 0)
    with pytest.raises(ArgumentError, match="DualPipeV requires at least"):
        torch_order("ScheduleDualPipeV", 4, 6)
    with pytest.raises(ArgumentError, match="torch_name"):
        torch_order("ScheduleNope", 4, 8)


def test_explore_schedules_shows_torch_against_tpviz():
    from tpviz.core import live
    from tpviz.core.widgets import LIVE_MIME
    from tpviz.pytorch import explore
    bundle = explore.explore_schedules()._repr_mimebundle_()
    assert 'data-name="render_schedules"' in live.book_html(bundle[LIVE_MIME])
    same = explore.comparison_rows("ScheduleDualPipeV", 2, 8)
    assert not any(r.get("d") for r in same) and "identical, op by op" in same[0]["note"]
    zb = explore.comparison_rows("ScheduleInterleavedZeroBubble", 4, 8)
    ops = [r for r in zb if "y" in r]
    assert any(r["d"] for r in ops) and {r["l"][0] for r in ops if r["y"] % 2 == 0} == set("FBW")
    # tpviz refuses m = 6 interleaved on 4 ranks; torch runs it: the message says both
    with pytest.raises(ArgumentError, match="torch's ScheduleInterleaved1F1B runs"):
        explore.plan("ScheduleInterleaved1F1B", 4, 6)
    with pytest.raises(ArgumentError, match=r"explore_schedules\(ranks=9\)"):
        explore.explore_schedules(ranks=9)
    rows, ids = live.table(explore.LIVE)  # the page's figure is these plan-level rows
    want = explore.comparison_rows("ScheduleZBVZeroBubble", 4, 8)
    got = [{k: v for k, v in r.items() if k != "_id"} for r in rows
           if r["_id"] == ids[live.key(["ScheduleZBVZeroBubble", 4, 8])]]
    assert got == want


# ---- runs on gloo processes (one launch each) ----------------------------------------------

@pytest.fixture(scope="module")
def check():
    from tpviz.pytorch import check as module
    return module


def test_seed_runs_equal_one_process(check):
    rep = check.seed(sweep=dict(sizes=(64, 8, 4), repeats=5))
    assert max(rep.errors.values()) < 1e-5
    spans = rep.results["spans"]
    for i, (_, chunk, _, end) in enumerate(s for s in spans[0] if s[0] == "F"):
        start = next(s[2] for s in spans[1] if s[:2] == ("F", chunk))
        assert start >= end  # rank 1 works on chunk i only after rank 0 finished it
        assert chunk == i
    rows = rep.results["sweep"]
    assert set(rows) == {"one process", 64, 8, 4}
    assert all(len(r["wall"]) == 5 for r in rows.values())
    # one chunk: the ranks take turns (causality); 16 chunks: more work than one, every time
    assert (rows[64]["bubble"] >= 0.5).all()
    assert (rows[4]["cpu"] > rows[64]["cpu"]).all()
    # a step is timed to the end of rank 0's work: its last backward is the step's last op
    for size in (64, 8, 4):
        for (r0, r1), wall in zip(rows[size]["spans"], rows[size]["wall"], strict=True):
            assert max(s[3] for s in r1) <= max(s[3] for s in r0)
            assert max(s[3] for s in r0) - min(s[2] for s in r0) <= wall


@pytest.mark.slow
def test_every_schedule_equals_one_process_and_matches_tpviz(check):
    rep = check.schedules()
    assert len(rep.results) >= 5 and max(rep.errors.values()) < 1e-5
    for name in ("ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B"):
        assert rep.results[name]["ran"].equal, rep.results[name]["ran"].explanation
    zb = rep.results["ScheduleInterleavedZeroBubble"]["ran"]
    assert "I (input gradient) and W" in zb.explanation
    # what really ran holds every F and B (or I and W) exactly once per microbatch and chunk
    for name, found in rep.results.items():
        ops = [op for ops in found["ran"].torch_ops for op in ops]
        assert len(ops) == len(set(ops)), name


def test_fsdp_and_dtensor_match_the_plans(check):
    rep = check.sharding()
    assert max(rep.errors.values()) < 1e-5
    assert rep.results["fsdp True"]["bytes"] == [1632] * 4  # 3 * 272 * 8 bytes / 4 ranks
    assert rep.results["fsdp True"]["collectives"] == {"all-gather": 6, "reduce-scatter": 3}
    assert rep.results["megatron"] == {"forward": {"all-reduce": 1},
                                       "backward": {"all-reduce": 1}}
    assert rep.results["sequence parallel"]["forward"] == {"all-gather": 1,
                                                           "reduce-scatter": 1}


@pytest.mark.slow
def test_a_worker_under_torchrun_equals_one_process():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    # torchrun --standalone: a rendezvous on loopback at a free port
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "-m", "tpviz.pytorch.workers", "ddp", "--timeout", "60"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ddp: 2 processes, equal to one process" in done.stdout


@pytest.mark.slow
def test_workers_refuses_to_run_outside_a_launcher():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = str(ROOT / "src")
    done = subprocess.run([sys.executable, "-m", "tpviz.pytorch.workers", "ddp"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "torchrun --nproc-per-node" in done.stderr


# ---- the chapter's checkers: the solution passes, wrong answers fail with words -------------

def test_check_fsdp_bytes(capsys):
    from checking import fails, passes

    from tpviz.exercises import check_fsdp_bytes
    passes(check_fsdp_bytes, 4 * (64 * 64 + 64) * 2 / 8, capsys=capsys)
    fails(check_fsdp_bytes, 4 * 64 * 64 * 2 / 8, words="biases")
    fails(check_fsdp_bytes, 4 * (64 * 64 + 64) * 2, words="whole model")
    fails(check_fsdp_bytes, 4 * (64 * 64 + 64) * 4 / 8, words="bf16")


def test_check_jax_to_torch(capsys):
    from checking import fails, passes

    from tpviz.exercises import check_jax_to_torch
    right = {"make_mesh": "init_device_mesh", "P('x', None)": "Shard(0)",
             "P()": "Replicate()", "an unreduced sum": "Partial()", "psum": "all_reduce"}
    passes(check_jax_to_torch, right, capsys=capsys)
    fails(check_jax_to_torch, {**right, "P()": "Shard(0)"}, words="one entry")
    fails(check_jax_to_torch, {**right, "P('x', None)": "Replicate()", "P()": "Shard(0)"},
          words="2 of the 5")
    fails(check_jax_to_torch, {"make_mesh": "init_device_mesh"}, words="no answer")


def test_check_fsdp_collectives(capsys):
    from checking import fails, passes

    from tpviz.exercises import check_fsdp_collectives
    passes(check_fsdp_collectives, {True: {"all-gather": 10, "reduce-scatter": 5},
                                    False: {"all-gather": 5, "reduce-scatter": 5}},
           capsys=capsys)
    fails(check_fsdp_collectives, {True: {"all-gather": 10, "reduce-scatter": 5},
                                   False: {"all-gather": 10, "reduce-scatter": 5}},
          words="False: 10 all-gathers")
    fails(check_fsdp_collectives, {True: {"all-gather": 12, "reduce-scatter": 6},
                                   False: {"all-gather": 6, "reduce-scatter": 6}},
          words="reduce-scatters")  # counted the root as a unit


def test_check_pipeline_split(capsys):
    from checking import fails, passes

    from tpviz.exercises import check_pipeline_split
    even = [(0, 2), (2, 4), (4, 6), (6, 8)]
    passes(check_pipeline_split, {"bounds": even, "schedule": "Schedule1F1B",
                                  "microbatches": 16}, capsys=capsys)
    fails(check_pipeline_split, {"bounds": even, "schedule": "ScheduleGPipe",
                                 "microbatches": 4}, words="idles 43%")  # 3 / 7
    fails(check_pipeline_split, {"bounds": [(0, 5), (5, 6), (6, 7), (7, 8)],
                                 "schedule": "Schedule1F1B", "microbatches": 16},
          words="idles")  # uneven stages
    fails(check_pipeline_split, {"bounds": [(0, 2), (2, 4), (4, 6), (5, 8)],
                                 "schedule": "Schedule1F1B", "microbatches": 16},
          words="no gap or overlap")
    fails(check_pipeline_split, {"bounds": even, "schedule": "ScheduleInterleaved1F1B",
                                 "microbatches": 8}, words="runs 8 stages")


def test_check_schedule_design(capsys):
    from checking import fails, passes

    from tpviz.exercises import check_schedule_design
    passes(check_schedule_design, ("Schedule1F1B", 32), capsys=capsys)
    passes(check_schedule_design, ("ScheduleInterleaved1F1B", 16), capsys=capsys)
    fails(check_schedule_design, ("ScheduleGPipe", 32), words="holds 32")
    fails(check_schedule_design, ("Schedule1F1B", 16), words="above 10")  # 3 / 19
    fails(check_schedule_design, ("Schedule1F1B", 12), words="do not split")
