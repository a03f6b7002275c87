# ruff: noqa: RUF005 - lists of nonsense values, joined
"""The cases of benchmarks/probe_round2.py: for each function, a valid call (``CONTROLS``) and
one nonsense value per case in place of one of its arguments (``CASES``)."""

from __future__ import annotations

SETUP = """
import sys
import numpy as np
import tpviz
from jax.sharding import PartitionSpec as P
import tpviz.layouts as L, tpviz.collectives as C, tpviz.machines as M, tpviz.matmul as MM
import tpviz.megatron as MG, tpviz.zero as Z, tpviz.mesh2d as M2, tpviz.pipeline as PL
import tpviz.asyncpipe as A, tpviz.context as CX, tpviz.moe as MO, tpviz.together as T
import tpviz.autoshard as AU, tpviz.inference as I
CPM = sys.modules["tpviz.collectives.plan"]
AF = sys.modules["tpviz.asyncpipe.formulas"]
B, MD, PD = C.buckets, M.draw, PL.draw
ZC, CXC, CXB, IP, IS = Z.check, CX.compare, CX.balance, I.paged, I.serve
nan, inf = float("nan"), float("inf")
S = PL.schedule("1f1b", 4, 8)
TL = PL.simulate(S)
LOG = np.random.default_rng(0).normal(size=(16, 8))
PROBS = MO.softmax(LOG)
EXP = np.stack([np.arange(16) % 8, (np.arange(16) + 1) % 8], axis=1)
"""

# nonsense values, by what the argument is
COUNT = ["-3", "0", "2.5", "nan", "inf", "'8'", "True", "None", "[8]"]
HUGE = ["10**12", "2**62"]
TIME = ["-1.0", "nan", "inf", "'1e-6'", "True", "None", "-1e-300"]
RATE = ["0.0", "-1e9", "nan", "'1e9'", "False", "None"]
NAME = ["'bogus'", "''", "3", "None", "('ring',)"]
FLAG = ["'yes'", "'no'", "'False'", "2", "None", "'0'"]
SHAPE = ["()", "(8, -16)", "(8, 0)", "'8x16'", "(8, 2.5)", "[8, nan]", "8", "(8, '16')"]
MESH = ["{}", "{'X': 0, 'Y': 4}", "{'X': -2, 'Y': 4}", "{'X': 2.5, 'Y': 4}", "'X=2, Y=4'",
        "{'X': 2, 'Y': '4'}"]
SPEC = ["P('Q', None)", "P('X', 'X')", "3", "'A[I_Q, J]'", "P('X', 'Y', 'X')"]
SHARE = ["-0.1", "1.5", "nan", "'0.5'", "None"]
SEQ = ["[]", "[1.0, -2.0]", "[nan, 1.0]", "'abc'", "[1.0, '2']", "3"]
SEED = ["-1", "2**40", "1.5", "'0'"]

# Values the first run found silent that are valid after all, taken out: bucket_bytes=inf
# (one bucket), mesh2d.plan on a 16 × 16 mesh (a plan needs no devices), system=None, t_f=None,
# t_b=None, labels=None (the defaults), sequence=1000 on 8 devices (it divides), huge sizes
# in context.plan, moe.plan and chip_counts (formulas, or "at most"), context.mesh_of(3);
# the second run: zero.check.train(devices=3) (it trains on 3 of the 8 devices, in 5 s).
F: dict[str, tuple[str, dict[str, str], dict[str, list[str]]]] = {}


def f(label: str, call: str, valid: dict[str, str], **bad: list[str]) -> None:
    F[label] = (call, valid, bad)


MESH_XY = "{'X': 2, 'Y': 4}"
# layouts
f("shard_shape", "L.shard_shape", dict(shape="(8, 16)", spec="P('X', 'Y')",
                                       mesh_shape=MESH_XY),
  shape=SHAPE + ["(7, 16)"], spec=SPEC, mesh_shape=MESH)
f("bytes_per_device", "L.bytes_per_device",
  dict(shape="(8, 16)", dtype="'float32'", spec="P('X', 'Y')", mesh_shape=MESH_XY),
  dtype=["'float33'", "''", "3", "None"], shape=["(2**40, 2**40)", "(8, -1)"])
f("replication", "L.replication", dict(spec="P('X', None)", mesh_shape=MESH_XY),
  spec=SPEC, mesh_shape=MESH)
f("parse", "L.parse", dict(notation="'A[I_X, J_Y]'"),
  notation=["''", "'A[I_X'", "'A[I_X, J_X]'", "3", "None", "'A[I_X, J_Y, K_Z, L_W]x'"])
f("to_notation", "L.to_notation", dict(spec="P('X', None)"),
  spec=["'A[I_X]'", "3", "None", "('X',)"], ndim=["-1", "2.5", "100", "'2'", "1"],
  name=["''", "3"])
# collectives
ARGS_C = dict(algorithm="'ring'", op="'all-reduce'", devices="8", nbytes="1e6")
f("plan", "C.plan", ARGS_C, algorithm=NAME, op=NAME, devices=COUNT + HUGE + ["10**6"],
  nbytes=TIME)
f("crossover", "C.crossover",
  dict(a="'ring'", b="'tree'", devices="8", alpha="1e-6", beta="1e9"),
  a=NAME, devices=COUNT + HUGE, alpha=TIME, beta=RATE, op=NAME)
f("lower_bound", "C.lower_bound", dict(devices="8", nbytes="1e6"), devices=COUNT + HUGE,
  nbytes=TIME)
f("plan.time", "CPM.time", dict(algorithm="'ring'", devices="8", nbytes="1e6", alpha="1e-6",
                                beta="1e9"),
  algorithm=NAME, devices=COUNT + HUGE, nbytes=TIME, alpha=TIME, beta=RATE, op=NAME)
f("render_collectives", "C.render_collectives",
  dict(algorithm="'ring'", devices="8", size="'1 MB'", alpha_us="5.0", beta_gbs="50.0"),
  algorithm=NAME, devices=COUNT + HUGE, size=["'1 XB'", "''", "'-1 MB'", "'nan MB'", "3"],
  alpha_us=TIME, beta_gbs=RATE)
G3 = "[1e6, 2e6, 3e6]"
f("buckets.assign", "B.assign", dict(grad_bytes=G3, bucket_bytes="2e6"),
  grad_bytes=SEQ, bucket_bytes=[v for v in TIME if v != "inf"])  # inf: one bucket
SIM = dict(grad_times="[1.0, 1.0, 1.0]", grad_bytes=G3, bucket_bytes="2e6", devices="8",
           alpha="1e-6", beta="1e9")
f("buckets.simulate", "B.simulate", SIM, grad_times=SEQ + ["[1.0, 1.0]"],
  grad_bytes=["[1e6, 2e6]", "[-1.0, 1, 1]"], devices=COUNT + HUGE, alpha=TIME,
  beta=["0.0", "-1e9", "nan", "'1e9'"], algorithm=NAME)
f("buckets.best_bucket", "B.best_bucket",
  {k: v for k, v in SIM.items() if k != "bucket_bytes"},
  sizes=["[]", "[-1.0]", "[nan]", "'big'"], devices=["0", "-8", "2.5"])
f("buckets.candidates", "B.candidates", dict(grad_bytes=G3), grad_bytes=SEQ)
# machines
f("render_roofline", "M.render_roofline", dict(chip="'TPU v5e'", eight_bit="False",
                                               batch="256"),
  chip=NAME, eight_bit=FLAG, batch=COUNT + HUGE)
f("render_network", "M.render_network", dict(kind="'all-gather'", megabytes="10.0"),
  machine=NAME, group=NAME, kind=NAME, megabytes=TIME)
f("torus", "MD.torus", dict(mesh_shape="(4, 4)", wrap="(False, False)"),
  mesh_shape=SHAPE + ["(2,) * 9", "(10**6, 10**6)"],
  wrap=["(True,)", "('yes', 'no')", "True", "(False, False, False)"], title=["3"])
f("draw.roofline", "MD.roofline", dict(chip="'TPU v5e'"),
  chip=NAME, dtype=NAME, batches=["()", "(0,)", "(-1, 2)", "(2**40,)", "'16'"])
# matmul
f("matmul.plan", "MM.plan", dict(x_shape="(8, 16)", w_shape="(16, 32)",
                                 x_spec="P('X', 'Y')", w_spec="P('Y', None)",
                                 mesh_shape=MESH_XY),
  x_shape=SHAPE + ["(8, 17)", "(8,)"], w_shape=["(17, 32)", "(16,)", "(16, -32)"],
  x_spec=SPEC, mesh_shape=MESH, dtype=NAME, reduce_scatter=FLAG)
# megatron
f("megatron.plan", "MG.plan", dict(tokens="2048", hidden="1024", ffn="4096", heads="16",
                                   devices="4"),
  tokens=COUNT, hidden=COUNT + ["1001"], ffn=COUNT, heads=COUNT + ["3"],
  devices=COUNT + HUGE + ["3"], dtype=NAME, kind=NAME)
f("megatron.shapes", "MG.shapes", dict(kind="'mlp'", hidden="64", ffn="256"),
  kind=NAME, hidden=COUNT, ffn=COUNT)
f("megatron.specs", "MG.specs", dict(kind="'mlp'"), kind=NAME, axis=["''", "3", "None"])
f("megatron.init", "MG.init", dict(hidden="64", ffn="256", kind="'mlp'"),
  hidden=COUNT + ["10**6"], ffn=["10**7", "0"], seed=SEED, kind=NAME)
# zero
ZARGS = dict(params="7.5e9", devices="64", stage="2")
STAGE = ["4", "-1", "1.5", "'2'", "True", "None"]
f("zero.memory", "Z.memory", ZARGS, params=RATE, devices=COUNT + HUGE, stage=STAGE,
  param_bytes=["-2", "nan", "'2'"], optimizer_bytes=["-12", "inf"])
f("zero.communication", "Z.communication", ZARGS, params=RATE, devices=COUNT, stage=STAGE)
f("zero.collectives", "Z.collectives", ZARGS, stage=STAGE, param_bytes=["-2", "nan"])
f("zero.fsdp_collectives", "Z.fsdp_collectives", dict(nbytes="1e9", devices="8"),
  nbytes=TIME, devices=COUNT, reshard_after_forward=FLAG)
f("zero.smallest_devices", "Z.smallest_devices", dict(params="7.5e9", stage="2",
                                                      capacity="80e9"),
  capacity=RATE, stage=STAGE, bogus=["3"])
f("zero.check.train", "ZC.train", dict(stage="1", layers="2", width="32", steps="1"),
  steps=COUNT + ["10**6"], width=COUNT + ["10**6"], layers=["0", "-1", "100"],
  devices=["0", "10**6"])
# mesh2d
M2ARGS = dict(batch="16", hidden="32", ffn="64")
f("mesh2d.plan", "M2.plan", M2ARGS, batch=COUNT + ["15"], hidden=COUNT, ffn=COUNT + ["63"],
  mesh=["(3, 3)", "(4,)", "(0, 8)", "(4, -2)", "'4x2'"], dtype=NAME)
M2C = dict(batch="16384", hidden="4096", ffn="16384")
f("mesh2d.compare", "M2.compare", M2C, batch=COUNT, devices=COUNT + HUGE, dtype=NAME)
f("mesh2d.meshes", "M2.meshes", dict(M2C, devices="8"), devices=COUNT + HUGE, ffn=COUNT)
f("mesh2d.best_mesh", "M2.best_mesh", M2C, system=NAME[:3], devices=["0", "-8", "2.5", "2**40"])
# pipeline
f("schedule", "PL.schedule", dict(name="'1f1b'", stages="4", microbatches="8"),
  name=NAME, stages=COUNT + HUGE, microbatches=COUNT + HUGE, chunks=["0", "-1", "2.5", "'2'"])
f("simulate", "PL.simulate", dict(sched="S", t_f="1.0", t_b="2.0"),
  sched=["'1f1b'", "None", "3", "TL"], t_f=RATE[:-1], t_b=RATE[:-1], p2p=TIME)
f("steady_state", "PL.steady_state", dict(sched="S"), sched=["'1f1b'", "None"],
  steps=COUNT + HUGE, t_f=RATE, p2p=TIME, durations=["{}", "{'F': -1.0}", "'F=1'"])
f("bubble_formula", "PL.bubble_formula", dict(name="'1f1b'", stages="4", microbatches="8"),
  name=NAME, stages=COUNT, microbatches=COUNT, chunks=["0", "-2", "2.5"],
  forward=RATE, backward=RATE)
f("balance", "PL.balance", dict(costs="[1.0, 2.0, 3.0, 4.0]", stages="2"),
  costs=SEQ, stages=COUNT + ["5", "10**9"])
f("gantt", "PD.gantt", dict(t="TL"), t=["'1f1b'", "None", "S", "3"], title=["3"],
  labels=[v for v in FLAG if v != "None"])
f("animate", "PD.animate", dict(t="TL", frames="4"), frames=COUNT + HUGE,
  ms_per_frame=COUNT + HUGE)
f("held_over_time", "PD.held_over_time", dict(t="TL", device="0"),
  device=["4", "-1", "1.5", "'0'", "None"])
# asyncpipe
f("versions", "A.versions", dict(name="'pipedream'", steps="8", stages="4"),
  name=NAME, steps=COUNT + HUGE, stages=COUNT + HUGE)
f("asyncpipe.table", "A.table", dict(p="4", m="8", names="('1f1b',)"),
  p=COUNT + HUGE, m=COUNT + HUGE, names=["()", "('bogus',)", "'1f1b'", "(3,)"])
f("paper_bubble", "AF.paper_bubble", dict(name="'1f1b'", p="4", m="8"),
  name=NAME, p=COUNT, m=COUNT)
# context
f("zigzag_order", "CX.zigzag_order", dict(sequence="64", devices="8"),
  sequence=COUNT + HUGE + ["60"], devices=COUNT + HUGE)
f("striped_order", "CX.striped_order", dict(sequence="64", devices="8"),
  sequence=COUNT + ["60"], devices=COUNT)
f("causal_work", "CX.causal_work", dict(devices="8", layout="'zigzag'"),
  devices=COUNT + HUGE, layout=NAME, tiles=COUNT + HUGE)
CXA = dict(scheme="'ring'", sequence="1024", heads="8", devices="8")
f("context.check_sizes", "CX.check_sizes", CXA, scheme=NAME, sequence=COUNT + ["1001"],
  heads=COUNT, devices=COUNT, layout=NAME, kv_heads=["3", "0", "-1", "16"])
f("context.plan", "CX.plan", dict(CXA, hidden="512"), scheme=NAME, sequence=COUNT,
  hidden=COUNT, training=FLAG, kv_heads=["3", "0", "-1"], dtype=NAME)
f("compare.flops", "CXC.flops", dict(sequence="1024", hidden="512", devices="8"),
  sequence=COUNT, hidden=COUNT, causal=FLAG, batch=COUNT)
f("context.mesh_of", "CX.mesh_of", dict(devices="8"), devices=COUNT + ["10**6"],
  axis=["''", "3", "None"], ulysses=["3", "0", "16", "-2"])
f("balance.imbalance", "CXB.imbalance", dict(flops="[1.0, 2.0]"),
  flops=SEQ + ["[0.0, 0.0]"])
# moe
f("capacity", "MO.capacity", dict(tokens="1024", experts="8", top_k="2",
                                  capacity_factor="1.25"),
  tokens=COUNT, experts=COUNT, top_k=COUNT + ["9"], capacity_factor=RATE)
f("moe.plan", "MO.plan", dict(tokens="1024", experts="8", top_k="2", capacity_factor="1.25",
                              devices="8"),
  tokens=COUNT, experts=COUNT + ["3"], top_k=["9", "0"], devices=COUNT + ["3"],
  hidden=COUNT, dtype=NAME)
f("skewed_logits", "MO.skewed_logits", dict(tokens="64", experts="8"),
  tokens=COUNT + HUGE, experts=COUNT + HUGE, skew=["nan", "-1.0", "inf", "'0'"], seed=SEED)
f("softmax", "MO.softmax", dict(logits="LOG"),
  logits=["np.zeros((0, 8))", "np.full((4, 8), nan)", "'abc'", "[[1, 2], [3]]", "None"],
  axis=["5", "1.5", "'0'"])
f("top_k", "MO.top_k", dict(logits="LOG", k="2"), k=COUNT + ["9"], order=NAME,
  logits=["LOG[:, :0]", "LOG.astype(str)"])
f("keep", "MO.keep", dict(experts="EXP", num_experts="8", capacity="4"),
  experts=["EXP + 8", "EXP * 1.5", "EXP[:, :0]", "EXP[0]"], num_experts=COUNT + HUGE,
  capacity=["-1", "2.5", "nan"], groups=["0", "3", "-1"])
f("aux_loss", "MO.aux_loss", dict(probs="PROBS", experts="EXP"),
  probs=["PROBS * nan", "PROBS[:8]", "-PROBS"], experts=["EXP + 8", "EXP - 9"],
  weight=["nan", "-1.0", "inf"])
f("route", "MO.route", dict(logits="LOG", top_k_="2", capacity_factor="1.25"),
  top_k_=["0", "9", "-1"], capacity_factor=RATE, groups=["0", "3", "17"], order=NAME)
# together
TP = dict(model="'GPT-3 2.7B'", cluster="'A100 80GB (Selene)'", t="8", p="1", d="1")
f("together.plan", "T.plan", TP, model=NAME, cluster=NAME, t=COUNT + HUGE + ["3"],
  p=COUNT, d=COUNT, zero_stage=STAGE, recompute=NAME, sequence_parallel=FLAG)
f("activation_bytes", "T.activation_bytes", dict(seq="2048", batch="1", hidden="2560",
                                                  heads="32"),
  seq=COUNT, batch=COUNT, hidden=COUNT, heads=COUNT + ["3"], tensor=["3", "0"],
  recompute=NAME)
f("together.Model", "T.Model", dict(name="'x'", layers="2", hidden="64", heads="4"),
  layers=COUNT, hidden=COUNT, heads=COUNT + ["3"], kv_heads=["3", "-1"], name=["3", "''"])
# autoshard
f("autoshard.mlp", "AU.mlp", dict(batch="64", hidden="32", ffn="64"),
  batch=COUNT, hidden=COUNT, layers=COUNT + ["65"], dtype=NAME)
f("Builder", "AU.Builder", dict(x="(8, 16)"),
  x=["(8,)", "(8, 2.5)", "(0, 8)", "'8x16'", "(8, -16)", "None"], dtype=NAME)
f("autoshard.layouts", "AU.layouts", dict(shape="(8, 16)", mesh_shape=MESH_XY),
  shape=SHAPE, mesh_shape=MESH)
f("reshard", "AU.reshard", dict(shape="(8, 16)", src="P('X', None)", dst="P(None, 'X')",
                                mesh_shape=MESH_XY),
  src=SPEC, dst=SPEC, shape=["(7, 16)", "(8,)", "(8, -16)"], dtype=NAME)
f("transformer", "AU.transformer", dict(tokens="64", hidden="32", ffn="64", heads="4"),
  heads=COUNT + ["3"], tokens=COUNT, layers=["0", "65"])
# inference
IA = dict(model="'LLaMA-3 70B'", system="'TPU v5e'", chips="16", batch="32", context="8192")
f("decode", "I.decode", IA, model=NAME, system=NAME, chips=COUNT + HUGE + ["3"],
  batch=COUNT + HUGE, context=["-1", "nan", "2.5", "'8k'"], dtype=NAME, queries=["0", "-1"],
  kv_dtype=["'bogus'", "3"])
f("kv_cache_bytes", "I.kv_cache_bytes", dict(model="'LLaMA-3 70B'", tokens="8192"),
  model=NAME, tokens=COUNT, dtype=NAME)
f("weight_bytes", "I.weight_bytes", dict(model="'LLaMA-3 70B'"), model=NAME, dtype=NAME)
f("min_chips", "I.min_chips", dict(model="'LLaMA-3 70B'", system="'TPU v5e'"),
  system=NAME, batch=COUNT + HUGE, context=["-1", "nan"])
f("max_batch", "I.max_batch", dict(model="'LLaMA-3 70B'", system="'TPU v5e'", chips="16",
                                   context="8192"),
  chips=COUNT + ["3"], context=["-1", "nan", "2.5"])
f("speculative", "I.speculative", dict(acceptance="0.8", draft_tokens="4", cost_ratio="0.1"),
  acceptance=SHARE, draft_tokens=COUNT + HUGE, cost_ratio=["-1.0", "nan", "inf", "'0.1'"])
f("slice_shape", "I.slice_shape", dict(system="'TPU v5e'", chips="16"),
  system=NAME, chips=COUNT + HUGE + ["3"])
f("paged.simulate", "IP.simulate", dict(lengths="(100, 200)", max_tokens="1024"),
  lengths=["()", "(0,)", "(-5,)", "(2.5,)", "'100'"], max_tokens=COUNT + HUGE,
  block=COUNT + HUGE)
f("chip_counts", "I.chip_counts", dict(system="'TPU v5e'"), system=NAME, most=COUNT)
f("transfer_s", "IS.transfer_s", dict(system="'TPU v5e'", chips="16", nbytes="1e9"),
  chips=COUNT, nbytes=TIME)
# the package
f("make_mesh", "tpviz.make_mesh", dict(shape="(2, 4)", axis_names="('X', 'Y')"),
  shape=["(3, 4)", "(2,)", "(0, 8)", "(2, -4)", "'2x4'", "(2, 4.0)"],
  axis_names=["('X', 'X')", "('X',)", "('X', 3)", "'XY'", "('', 'Y')"])


def _call(call: str, args: dict[str, str]) -> str:
    return f"{call}({', '.join(f'{k}={v}' for k, v in args.items())})"


FRESH = {"zero.check.train"}  # valid calls that run jax on the mesh: in a fresh process
CONTROLS = {label: _call(call, valid) for label, (call, valid, _) in F.items()}
CASES = [(label, _call(call, {**valid, param: value}), param)
         for label, (call, valid, bad) in F.items()
         for param, values in bad.items() for value in values]
