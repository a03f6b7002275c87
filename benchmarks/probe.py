"""A fresh probe of bad input (issue 32): about 250 calls a careless or hostile learner makes.

Each public plan-level function is called with good arguments once (it must work), then with one
argument at a time replaced by a bad value (0, negative, fractional, a string, None, a bool, NaN,
infinity, an unknown name); then every size guard, and the checkers with wrong answers. Each call
runs in a worker thread under a time limit (:func:`tpviz.core.sandbox.run_limited`) and is
classed as:

- clear: a tpviz error (``tpviz.errors.TpvizError``) or a checker's ✗ (``ExerciseFailed``);
- raw: any other exception (a traceback from deep inside);
- silent: no error at all (a wrong answer or a bad argument accepted);
- hang: still running after ``--limit`` seconds; slow: clear, but after more than 2 s.

Usage: ``python benchmarks/probe.py [--limit 10] [-v]`` (prints the table and every non-clear
call). Run from the repository root with ``src`` on the path.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import math
import sys
import time
from collections import Counter

import tpviz

tpviz.setup_devices(8, verbose=False)

from tpviz import exercises  # noqa: E402
from tpviz.core import cost, sandbox, verify  # noqa: E402
from tpviz.core.exercises import ExerciseFailed  # noqa: E402
from tpviz.errors import TpvizError  # noqa: E402

NAN, INF = math.nan, math.inf
BAD_INT = [0, -3, 2.5, "8", None, True, NAN]
BAD_FLOAT = [-1.0, NAN, INF, "1e6", None, True]
BAD_STR = ["nope", 5, None]


def f(module: str, name: str):
    return getattr(importlib.import_module(f"tpviz.{module}"), name)


# (function, good keyword arguments, {argument: kind of bad values})
CALLS = [
    (f("collectives.plan", "plan"), dict(algorithm="ring", op="all-reduce", devices=8,
                                         nbytes=1e6),
     {"algorithm": "s", "op": "s", "devices": "i", "nbytes": "f"}),
    (f("collectives.plan", "time"), dict(algorithm="ring", devices=8, nbytes=1e6, alpha=1e-6,
                                         beta=1e9), {"devices": "i", "nbytes": "f", "beta": "b"}),
    (f("collectives.plan", "crossover"), dict(a="ring", b="tree", devices=8, alpha=1e-6,
                                              beta=1e9),
     {"a": "s", "devices": "i", "alpha": "f", "beta": "b"}),
    (f("collectives", "render_collectives"), dict(algorithm="ring", devices=8, size="1 MB"),
     {"algorithm": "s", "devices": "i", "size": "s"}),
    (f("layouts", "blocks"), dict(shape=(8, 8), spec="A[I_X, J]", mesh_shape={"X": 4}),
     {"spec": "s"}),
    (f("layouts", "bytes_per_device"), dict(shape=(8, 8), dtype="float32", spec="A[I_X, J]",
                                            mesh_shape={"X": 4}), {"dtype": "s", "spec": "s"}),
    (f("matmul", "plan"), dict(x_shape=(16, 32), w_shape=(32, 64), x_spec="In[B_X, D_Y]",
                               w_spec="W1[D_Y, F]", mesh_shape={"X": 2, "Y": 4}),
     {"x_spec": "s", "w_spec": "s"}),
    (f("megatron", "plan"), dict(tokens=2048, hidden=1024, ffn=4096, heads=16, devices=4,
                                 dtype="bf16"),
     {"tokens": "i", "hidden": "i", "ffn": "i", "heads": "i", "devices": "i", "dtype": "s"}),
    (f("zero", "memory"), dict(params=1e9, devices=8, stage=2),
     {"params": "f", "devices": "i", "stage": "z"}),
    (f("zero", "communication"), dict(params=1e9, devices=8, stage=2),
     {"params": "f", "devices": "i", "stage": "z"}),
    (f("megatron.explore", "render_megatron"), dict(devices=4, hidden=1024, ffn_ratio=4, heads=16,
                                            tokens=2048, dtype="bf16"),
     {"devices": "i", "hidden": "i", "dtype": "s"}),
    (f("mesh2d", "plan"), dict(batch=64, hidden=128, ffn=512, mesh=(4, 2), dtype="bf16"),
     {"batch": "i", "hidden": "i", "ffn": "i", "dtype": "s"}),
    (f("mesh2d", "best_mesh"), dict(batch=64, hidden=128, ffn=512, devices=8),
     {"batch": "i", "devices": "i"}),
    (f("pipeline", "schedule"), dict(name="1f1b", stages=4, microbatches=8),
     {"name": "s", "stages": "i", "microbatches": "i"}),
    (f("pipeline", "balance"), dict(costs=[1, 2, 3, 4], stages=2), {"stages": "i"}),
    (f("pipeline", "bubble_formula"), dict(name="1f1b", stages=4, microbatches=8),
     {"name": "s", "stages": "i", "microbatches": "i"}),
    (f("moe", "plan"), dict(tokens=4096, experts=32, top_k=2, capacity_factor=1.25, devices=8),
     {"tokens": "i", "experts": "i", "top_k": "i", "capacity_factor": "f", "devices": "i"}),
    (f("moe", "skewed_logits"), dict(tokens=64, experts=8), {"tokens": "i", "experts": "i"}),
    (f("together", "activation_bytes"), dict(seq=2048, batch=1, hidden=4096, heads=32,
                                             tensor=8),
     {"seq": "i", "batch": "i", "hidden": "i", "heads": "i", "tensor": "i"}),
    (f("together", "plan"), dict(model="GPT-3 13B", cluster="A100 80GB (Selene)", t=8, p=2, d=4),
     {"model": "s", "cluster": "s", "t": "i", "p": "i", "d": "i"}),
    (f("autoshard", "stages"), dict(layer_costs=[1, 1, 2], devices=2, microbatches=4,
                                    submeshes=[(1,)]), {"devices": "i", "microbatches": "i"}),
    (f("autoshard", "reshard"), dict(shape=(64, 64), src="A[I_X, J]", dst="A[I, J_X]",
                                     mesh_shape={"X": 4}), {"src": "s", "dtype": "s"}),
    (f("core.cost", "system"), dict(value="H100 (NVLink)"), {"value": "s"}),
    (f("devices", "make_mesh"), dict(shape=(8,), axis_names=("data",)), {}),
    # chapter 2: the hardware model and its explorers
    (f("core.hardware", "roofline"), dict(name="TPU v5e", flops=1e12, nbytes=1e9, dtype="bf16"),
     {"name": "s", "flops": "f", "nbytes": "f", "dtype": "s"}),
    (f("core.hardware", "matmul_intensity"), dict(b=256, d=4096, f=16384, itemsize=2),
     {"b": "i", "d": "i", "f": "i", "itemsize": "i"}),
    (f("core.hardware", "data_parallel_batch"), dict(flops=1e15, bandwidth=1e11, axes=1),
     {"flops": "f", "bandwidth": "f", "axes": "i"}),
    (f("core.hardware", "tensor_parallel_limit"), dict(flops=1e15, bandwidth=1e11, ffn=16384),
     {"flops": "f", "bandwidth": "f", "ffn": "i"}),
    (f("core.hardware", "best_fsdp"), dict(batch=1024.0, ffn=16384, devices=64),
     {"batch": "f", "ffn": "i", "devices": "i"}),
    (f("core.hardware", "tpu"), dict(name="TPU v5e", mesh_shape=(4, 4)),
     {"name": "s", "mesh_shape": "m"}),
    (f("core.hardware", "gpu_cluster"), dict(name="H100", gpus=16), {"name": "s", "gpus": "i"}),
    (lambda kind="all-gather", nbytes=1e6, gpus=16: f("core.hardware", "gpu_cluster")(
        "H100", 16).price(kind, nbytes, gpus), dict(kind="all-gather", nbytes=1e6, gpus=16),
     {"kind": "s", "nbytes": "f", "gpus": "g"}),
    (f("core.hardware", "chip_of"), dict(name="H100"), {"name": "s"}),
    (f("machines", "render_network"), dict(machine="TPU v5e 4×4", kind="all-gather",
                                           megabytes=10.0),
     {"machine": "s", "kind": "s", "megabytes": "f"}),
    (f("machines", "render_roofline"), dict(chip="TPU v5e", eight_bit=False, batch=256),
     {"chip": "s", "eight_bit": "t", "batch": "i"}),
    # chapter 8: the schedule zoo, the papers' formulas, the staleness run
    (f("asyncpipe.formulas", "paper_bubble"), dict(name="1f1b", p=4, m=8),
     {"name": "s", "p": "i", "m": "i"}),
    (f("asyncpipe.formulas", "table"), dict(p=4, m=8), {"p": "i", "m": "i"}),
    (f("asyncpipe", "versions"), dict(name="pipedream", steps=16, stages=4),
     {"name": "s", "steps": "i", "stages": "i"}),
    (f("asyncpipe.explore", "render_zoo"), dict(name="pipedream", stages=4, microbatches=8),
     {"name": "s", "stages": "i", "microbatches": "i", "split": "t"}),
    (f("asyncpipe", "train"), dict(labels=("synchronous",), steps=8, lrs=(0.05,), width=4,
                                   rows=2),
     {"labels": "l", "steps": "i", "lrs": "l", "width": "i", "rows": "i", "momentum": "f"}),
    # chapter 9: context parallelism
    (f("context", "plan"), dict(scheme="ring", sequence=1024, heads=8, hidden=512, devices=8),
     {"scheme": "s", "sequence": "i", "heads": "i", "hidden": "i", "devices": "i"}),
    (f("context", "zigzag_order"), dict(sequence=64, devices=8),
     {"sequence": "i", "devices": "i"}),
    (f("context", "causal_work"), dict(devices=8, layout="zigzag"),
     {"devices": "i", "layout": "s", "tiles": "i"}),
    (f("context.compare", "layer"), dict(scheme="ring", sequence=1024, heads=8, hidden=512,
                                         devices=8),
     {"scheme": "s", "sequence": "i", "system": "s", "dtype": "s", "causal": "t"}),
    (f("context.compare", "hiding_block"), dict(hidden=4096), {"hidden": "i", "system": "s",
                                                               "devices": "i"}),
    (f("context", "render_context"), dict(sequence=4096, devices=8, heads=32),
     {"sequence": "i", "devices": "i", "heads": "i", "scheme": "s", "system": "s"}),
    (f("context", "check"), dict(scheme="ulysses", sequence=16, heads=8, devices=8),
     {"scheme": "s", "sequence": "i", "heads": "i", "devices": "i", "causal": "t"}),
    # chapter 13: torch's schedules and FSDP2 read as tpviz plans (no torch needed)
    (f("pytorch.plan", "parse"), dict(action="0F1"), {"action": "s"}),
    (f("pytorch.plan", "fsdp_plan"), dict(params=10**6, devices=4, units=2,
                                          reshard_after_forward=True),
     {"params": "i", "devices": "i", "units": "i", "reshard_after_forward": "t"}),
    (f("pytorch.plan", "compare"), dict(torch_name="Schedule1F1B", order={0: ["0F0"]},
                                        microbatches=1),
     {"torch_name": "s", "order": "o", "microbatches": "i"}),
    # chapter 14: serving priced on core.hardware, and the paged cache
    (f("inference", "kv_cache_bytes"), dict(model="LLaMA-3 70B", tokens=8192, dtype="int8"),
     {"model": "s", "dtype": "s"}),
    (f("inference", "decode"), dict(model="LLaMA-3 70B", system="TPU v5e", chips=16, batch=8,
                                    context=4096, dtype="int8"),
     {"model": "s", "system": "s", "chips": "i", "batch": "i", "dtype": "s"}),
    (f("inference", "prefill"), dict(model="LLaMA-3 70B", system="H100", chips=8, tokens=2048),
     {"system": "s", "chips": "i", "tokens": "i"}),
    (f("inference", "speculative"), dict(acceptance=0.8, draft_tokens=4, cost_ratio=0.1),
     {"acceptance": "f", "cost_ratio": "f"}),
    (f("inference.paged", "simulate"), dict(lengths=[10, 20], max_tokens=64, block=16),
     {"max_tokens": "i", "block": "i"}),
    # the cross-process command's arguments (refused before any process starts)
    (lambda argv=(): _cluster(argv), dict(argv=None), {"argv": "c"}),
]
BAD = {"i": BAD_INT, "f": BAD_FLOAT, "s": BAD_STR, "z": [-1, 4, 2.5, "2", None, True],
       "b": [0.0, -1.0, NAN, "1e6", None, True],  # b: a bandwidth (infinite is allowed)
       "t": ["yes", 2, None],  # a flag
       "g": [x for x in BAD_INT if x is not None],  # None: the default (all)
       "m": [(0, 4), (4, -1), (4.5, 4), "4x4", None, (4, 4, 4, 4, 4)],  # a mesh shape
       "l": [(), ("nope",), "synchronous", None, (NAN,)],  # a tuple of names or numbers
       "o": [None, {0: [5]}, {0: ["0Q0"]}, [["0F0"]], {"x": ["0F0"]}],  # torch's order
       "c": [["--processes", "0"], ["--processes", "-2"], ["--processes", "two"],
             ["--devices-per-process", "0"], ["--processes", "100000"],
             ["--devices-per-process", "100000"], ["--topics", "nope"], ["--topics", ","],
             ["--timeout", "-5"], ["--timeout", "nan"], ["--timeout", "0"],
             ["--bogus"], ["--script", "/nonexistent/script.py"]]}


def _cluster(argv):
    """``python -m tpviz.cluster`` with ``argv``: a usage error (argparse's exit status 2 with
    its message) counts as clear; anything that starts processes is too late."""
    from tpviz.cluster.__main__ import main

    if argv is None:  # the good call: only the help
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main(["--help"])
        return None
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            status = main(list(argv))
    except SystemExit as e:
        if e.code == 2 and "error:" in err.getvalue():
            raise TpvizError(err.getvalue().strip().splitlines()[-1]) from None
        raise
    if status == 2 and "Error" in err.getvalue():
        raise TpvizError(err.getvalue().strip().splitlines()[-1])
    return status


def _p(module, name, *args, **kwargs):
    return lambda: f(module, name)(*args, **kwargs)


SIZE_GUARDS = {
    "collectives.plan ring K=20000": _p("collectives.plan", "plan", "ring", "all-reduce", 20000,
                                        1e6),
    "render_collectives tree K=4096": _p("collectives", "render_collectives", "tree", 4096),
    "collectives.time naive K=1e6": _p("collectives.plan", "time", "naive", 10**6, 1e6, 1e-6,
                                       1e9),
    "layouts.blocks 4096x4096": _p("layouts", "blocks", (4096, 4096), "A[I_X, J_Y]",
                                   {"X": 4096, "Y": 4096}),
    "autoshard.stages 2000 layers": _p("autoshard", "stages", [1.0] * 2000, 8, 8, [(1,)]),
    "autoshard.stages 2000 layers, 2 shapes": _p("autoshard", "stages", [1.0] * 2000, 8, 8,
                                                 [(1,), (2,)]),
    "pipeline.balance 5000 layers": _p("pipeline", "balance", [1.0] * 5000, 16),
    "moe.render_moe 2^20 x 2^20": _p("moe", "render_moe", experts=2**20, tokens=2**20),
    "moe.skewed_logits 2^20 x 2^12": _p("moe", "skewed_logits", 2**20, 2**12),
    "make_mesh bare string": _p("devices", "make_mesh", (8,), "data"),
    "reshard notation (must be right)": lambda: _reshard_right(),
    "activation_bytes tensor=7": _p("together", "activation_bytes", 2048, 1, 4096, 32, 7),
    "together.plan efficiency=5": _p("together", "plan", "GPT-3 13B", "A100 80GB (Selene)", 8,
                                     2, 4, efficiency=5.0),
    "render_megatron int4": _p("megatron.explore", "render_megatron", 4, 1024, 4, 16, 2048, "int4"),
    "mesh2d.step_time 'H100'": lambda: f("mesh2d", "step_time")(
        f("mesh2d", "plan")(64, 128, 512, (4, 2), "bf16"), "H100"),
    "moe plan.time 'H100'": lambda: f("moe", "plan")(4096, 32, 2, 1.25, 8).time("H100"),
    "setup_devices(10**9)": _p("devices", "setup_devices", 10**9),
    "verify.close NaN": lambda: verify.close([NAN] * 3, [1.0] * 3, "y"),
    "verify.close inf": lambda: verify.close([INF] * 3, [1.0] * 3, "y"),
}


def _reshard_right():
    from jax.sharding import PartitionSpec as P

    reshard = f("autoshard", "reshard")
    a = reshard((1024, 1024), "A[I_X, J]", "A[I, J_X]", {"X": 4})
    b = reshard((1024, 1024), P("X", None), P(None, "X"), {"X": 4})
    if [c.bytes for c in a] != [c.bytes for c in b] or not a:
        return "wrong"
    raise TpvizError("right answer (counted as clear)")


def _checkers():
    """Checkers taking one answer, with wrong answers of every kind."""
    out = {}
    for name in sorted(n for n in dir(exercises) if n.startswith("check_")):
        fn = getattr(exercises, name)
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.default is inspect.Parameter.empty]
        if len(params) != 1:
            continue
        for label, answer in (("None", None), ("a string", "abc"), ("NaN", NAN),
                              ("-1", -1), ("an unknown key", {"bogus": 1}),
                              ("a function returning None", lambda *a, **k: None)):
            out[f"{name}({label})"] = (lambda fn=fn, a=answer: fn(a))
    return out


def classify(call, limit: float) -> tuple[str, str, float]:
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            result = sandbox.run_limited(call, seconds=limit)
    except (sandbox.TimeUp, sandbox.StillRunning):
        return "hang", f"still running after {limit} s", time.perf_counter() - start
    except (TpvizError, ExerciseFailed) as e:
        took = time.perf_counter() - start
        return ("slow" if took > 2 else "clear"), str(e).splitlines()[0][:150], took
    except BaseException as e:  # a probe records every kind of failure
        return "raw", f"{type(e).__name__}: {str(e)[:150]}", time.perf_counter() - start
    took = time.perf_counter() - start
    said = out.getvalue()
    if "⏳" in said:  # a checker given None: "not attempted yet" is the right answer to it
        return "clear", said.strip()[:150], took
    return "silent", f"returned {result!r:.100}" + (f"; printed {said.strip()[:80]}"
                                                    if said.strip() else ""), took


def probes():
    out = {}
    for fn, good, args in CALLS:
        name = (f"{fn.__module__.removeprefix('tpviz.')}.{fn.__name__}"
                .replace("<lambda>", next(iter(good), "call"))
                .removeprefix("__main__."))
        out[f"{name}(good)"] = (lambda fn=fn, good=good: fn(**good))
        for arg, kind in args.items():
            for value in BAD[kind]:
                out[f"{name}({arg}={value!r})"] = (
                    lambda fn=fn, kw={**good, arg: value}: fn(**kw))
    out.update(SIZE_GUARDS)
    out.update(_checkers())
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=10.0)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    cost.system("H100 (NVLink)")  # warm imports
    results, good_failures = {}, []
    for name, call in probes().items():
        kind, message, took = classify(call, args.limit)
        if name.endswith("(good)"):
            if kind != "silent":
                good_failures.append(f"{name}: {kind}: {message}")
            continue
        results[name] = (kind, message, took)
        if args.verbose or kind != "clear":
            print(f"{kind:6} {took:5.2f} s  {name}: {message}", flush=True)
    counts = Counter(k for k, _, _ in results.values())
    total = len(results)
    print(f"\n{total} bad inputs: " + ", ".join(
        f"{k} {counts[k]} ({counts[k] / total:.0%})"
        for k in ("clear", "raw", "silent", "hang", "slow")))
    slowest = max(results.items(), key=lambda kv: kv[1][2])
    print(f"slowest: {slowest[0]} {slowest[1][2]:.2f} s")
    for line in good_failures:
        print("GOOD CALL FAILED:", line)
    return 0 if counts["clear"] == total else 1


if __name__ == "__main__":
    sys.exit(main())
