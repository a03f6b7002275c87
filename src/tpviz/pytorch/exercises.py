"""Checkers for the PyTorch chapter. The two build checkers run the learner's answer on gloo
processes (a DTensor plan; pipeline stages and a schedule), compare it with one process and read
what torch did (its collectives; its op order and tpviz's simulated bubble)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from tpviz.core.exercises import (
    Wrong,
    as_integer,
    as_number,
    checker,
    expect_bytes,
    is_stub,
)
from tpviz.errors import WorkerError
from tpviz.pipeline import schedule, simulate
from tpviz.pytorch import plan
from tpviz.zero import plan as zero

LAUNCH_TIMEOUT = 60.0


@checker("FSDP2's parameter bytes per rank")
def check_fsdp_bytes(answer) -> str:
    """4 Linear(64, 64) layers (weights and biases) in bf16, fully_shard-ed over 8 ranks."""
    params = 4 * (64 * 64 + 64)
    want = zero.memory(params, 8, 3, param_bytes=2).params
    wrong = {4 * 64 * 64 * 2 / 8: "that leaves out the biases (64 more parameters a layer)",
             params * 2: "that is the whole model: fully_shard keeps 1/8 of it on each rank",
             params * 4 / 8: "that counts 4 bytes a parameter; bf16 takes 2"}
    got = as_number(answer, "the bytes per rank")
    for value, why in wrong.items():
        if math.isclose(got, value):
            raise Wrong(f"{got:,.0f} bytes: {why}.")
    expect_bytes(got, want, what="the bytes per rank",
                  hint="Parameters × bytes each ÷ ranks: ZeRO stage 3's params term.")
    return "Each rank holds Ψ·2/N bytes of parameters between steps, as ZeRO-3 says."


TORCH_NAMES = {"make_mesh": "init_device_mesh", "P('x', None)": "Shard(0)",
               "P()": "Replicate()", "an unreduced sum": "Partial()",
               "psum": "all_reduce"}
# other spellings of the same answer: torch's own reprs (str(Shard(0)) is "S(0)")
TORCH_ALIASES = {"Shard(0)": ("Shard(dim=0)", "S(0)"), "Replicate()": ("R",),
                 "Partial()": ("Partial(sum)", "Partial(reduce_op=sum)", "P", "P(sum)")}


def _norm(text) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _torch_object(obj) -> bool:
    """Whether ``obj`` is torch's own function or placement object: found under its own name in
    the torch module it says it comes from (a function or class the learner wrote is not)."""
    import sys

    target = obj if callable(obj) and not isinstance(obj, type) and hasattr(obj, "__qualname__") \
        else type(obj)
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    if module is None or not module.__name__.startswith("torch"):
        return False
    found = module
    for part in str(getattr(target, "__qualname__", "")).split("."):
        found = getattr(found, part, None)
    return found is target


def _as_text(answer) -> str | None:
    """A string answer, or the name of torch's own object: a function by its name
    (``init_device_mesh``), a placement by its repr (``Shard(dim=0)``)."""
    if type(answer) is str:
        return answer
    if not _torch_object(answer):
        return None
    if callable(answer) and hasattr(answer, "__name__"):
        return answer.__name__
    return repr(answer)  # torch's own repr of its own placement class


def _names_match(answer, want: str) -> bool:
    """Whether ``answer`` names ``want`` (or one of its spellings), alone: a module path before
    a function's name is allowed (``torch.distributed.all_reduce``), anything else is not (a
    string listing several names is not right). torch's own objects are named by themselves:
    ``Shard(0)`` itself, ``init_device_mesh`` itself."""
    answer = _as_text(answer)
    if answer is None:
        return False
    spellings = {_norm(s) for s in (want, *TORCH_ALIASES.get(want, ()))}
    last = answer.strip().rsplit(".", 1)[-1] if "(" not in answer else answer.strip()
    return _norm(last) in spellings and (last == answer.strip() or all(
        part.strip().isidentifier() for part in answer.strip().split(".")))


@checker("JAX's names in PyTorch")
def check_jax_to_torch(answer) -> str:
    """A dict from each JAX name in :data:`TORCH_NAMES` to its PyTorch counterpart."""
    if not isinstance(answer, dict):
        raise Wrong(f"give a dict from each JAX name to a PyTorch name; got "
                    f"{type(answer).__name__}.")
    missing = [k for k in TORCH_NAMES if k not in answer or is_stub(answer[k])]
    if missing:
        raise Wrong(f"no answer for {', '.join(missing)}.")
    wrong = [k for k, v in TORCH_NAMES.items() if not _names_match(answer[k], v)]
    if len(wrong) > 1:
        raise Wrong(f"{len(wrong)} of the {len(TORCH_NAMES)} entries are not right.",
                    "A PartitionSpec entry names what is split; a DTensor placement says "
                    "how each mesh dimension holds the tensor.")
    if wrong:
        raise Wrong("one entry is not right.", "Check each in PyTorch's documentation: "
                    "DeviceMesh, DTensor's placements, the functional collectives.")
    return "make_mesh ↔ init_device_mesh; P ↔ placements; psum ↔ all_reduce."


@checker("FSDP2's collectives of one step")
def check_fsdp_collectives(answer) -> str:
    """5 Linear layers, each fully_shard-ed, then the root (no parameters of its own):
    ``{True: {"all-gather": n, "reduce-scatter": n}, False: {...}}`` by reshard_after_forward."""
    if not isinstance(answer, dict) or set(answer) != {True, False}:
        raise Wrong("give a dict with the keys True and False (reshard_after_forward), each a "
                    "dict of 'all-gather' and 'reduce-scatter' counts.")
    for raf in (True, False):
        want = plan.fsdp_plan(5 * 4160, 4, 5, raf)
        got = answer[raf]
        if not isinstance(got, dict) or set(got) != {"all-gather", "reduce-scatter"}:
            raise Wrong(f"answer[{raf}] should be a dict with the keys 'all-gather' and "
                        "'reduce-scatter'.")
        gathers, scatters = (as_integer(got[k], f"answer[{raf}][{k!r}]")
                             for k in ("all-gather", "reduce-scatter"))
        if scatters != want["reduce-scatter"]:
            raise Wrong(f"reshard_after_forward={raf}: {scatters} reduce-scatters is not right.",
                        "How many units own gradients, and how often is each reduced?")
        if gathers != want["all-gather"]:
            raise Wrong(f"reshard_after_forward={raf}: {gathers} all-gathers is not right.",
                        "Does a unit still hold its whole parameters when its backward "
                        "starts?")
    return "True: 2 all-gathers per unit (ZeRO-3); False: 1 (the parameters stay whole)."


PIPELINE_LAYERS, PIPELINE_BATCH, BUBBLE_TARGET = 8, 16, 0.20
EXACT = {c: n for c, (n, _, _) in plan.TORCH_SCHEDULES.items() if n in ("gpipe", "1f1b",
                                                                       "interleaved")}


def pipeline_bubble(bounds, torch_name: str, microbatches: int) -> float:
    """tpviz's simulated bubble of the schedule with equal stages, then the extra idle time of
    unequal ones (every stage waits for the slowest)."""
    name, v, _ = plan.TORCH_SCHEDULES[torch_name]
    t = simulate(schedule(name, len(bounds) // v, microbatches, v if v > 1 else 1))
    sizes = [b - a for a, b in bounds]
    return 1 - (1 - t.bubble_fraction) * np.mean(sizes) / max(sizes)


@checker("Pipeline stages and a schedule for a bubble target")
def check_pipeline_split(pipe) -> str:
    """``pipe = {"bounds": [(start, stop), ...], "schedule": "Schedule...", "microbatches":
    m}``: the 8-layer MLP on 4 processes, bubble ≤ 20 %, loss and gradients = one process."""
    if not isinstance(pipe, dict) or {"bounds", "schedule", "microbatches"} - set(pipe):
        raise Wrong("give a dict with the keys 'bounds', 'schedule' and 'microbatches'.")
    name, m = pipe["schedule"], as_integer(pipe["microbatches"], "microbatches")
    if name not in EXACT:
        raise Wrong(f"choose one of {', '.join(EXACT)} (the schedules tpviz simulates "
                    f"exactly); got {name!r}.")
    _, v, where = plan.TORCH_SCHEDULES[name]
    try:
        bounds = [(int(a), int(b)) for a, b in pipe["bounds"]]
    except (TypeError, ValueError):
        raise Wrong("bounds should be a list of (start, stop) layer pairs.") from None
    if len(bounds) != 4 * v:
        raise Wrong(f"{name} on 4 ranks runs {4 * v} stages; you gave {len(bounds)} bounds.")
    edges = [a for a, _ in bounds] + [bounds[-1][1]]
    if edges[0] != 0 or edges[-1] != PIPELINE_LAYERS or any(
            b != a2 for (_, b), (a2, _) in itertools.pairwise(bounds)) or any(
            b <= a for a, b in bounds):
        raise Wrong("the stages must cover layers 0 to 8 in order, each at least one layer, "
                    "with no gap or overlap.")
    if m < 1 or PIPELINE_BATCH % m or (name == "ScheduleInterleaved1F1B" and m % 4):
        raise Wrong(f"{m} microbatches do not split the batch of {PIPELINE_BATCH} (or, "
                    "interleaved, are not a multiple of the 4 ranks, which tpviz's interleaved "
                    "schedule needs; torch's would accept fewer).")
    bubble = pipeline_bubble(bounds, name, m)
    if bubble > BUBBLE_TARGET:
        raise Wrong(f"this pipeline idles {bubble:.0%} of the time; the target is at most "
                    f"{BUBBLE_TARGET:.0%}.",
                    "More microbatches, more chunks per rank, or evener stages.")
    from tpviz.pytorch import run  # torch: imported once the answer is worth running
    from tpviz.pytorch.check import launch_timed

    try:
        ranks, _ = launch_timed(run.pipelining, 4, ((name, v, where),), m, 0, tuple(bounds),
                                timeout=LAUNCH_TIMEOUT)
    except WorkerError as e:
        raise Wrong(f"the pipeline fails on the processes: {str(e).splitlines()[0][:200]}") \
            from None
    ref = run.mlp_reference()
    grads = {k: g for r in ranks for k, g in r[name]["grads"].items()}
    (loss,) = [r[name]["loss"] for r in ranks if r[name]["loss"] is not None]
    if not np.isclose(loss, ref["loss"], rtol=1e-5) or any(
            not np.allclose(grads[k], g, atol=1e-6) for k, g in ref["grads"].items()):
        raise Wrong("the pipeline's loss or gradients differ from one process's.")
    return f"{name} with {m} microbatches: bubble {bubble:.1%}, equal to one process."


@checker("A schedule for a bubble and a memory budget")
def check_schedule_design(design) -> str:
    """``design = (torch class, microbatches)`` on 4 stages, batch 32: bubble ≤ 10 % and rank
    0 holding at most 6 microbatches' activations of a whole stage at once."""
    if not isinstance(design, tuple) or len(design) != 2:
        raise Wrong("give a pair (schedule class name, microbatches).")
    name, m = design[0], as_integer(design[1], "microbatches")
    if name not in EXACT:
        raise Wrong(f"choose one of {', '.join(EXACT)}; got {name!r}.")
    own, v, _ = plan.TORCH_SCHEDULES[name]
    if m < 1 or 32 % m or (own == "interleaved" and m % 4):
        raise Wrong(f"{m} microbatches do not split 32 sequences (or, interleaved, are not a "
                    "multiple of 4, which tpviz's interleaved schedule needs).")
    t = simulate(schedule(own, 4, m, v))
    held = t.peak_activations[0] / v  # a chunk holds 1/v of a stage's activations
    if t.bubble_fraction > 0.10:
        raise Wrong(f"bubble {t.bubble_fraction:.1%}: above 10 %.", "More microbatches.")
    if held > 6:
        raise Wrong(f"rank 0 holds {held:g} microbatches of activations at its peak: above "
                    "6.", "Which schedules start backwards before all forwards are done?")
    return f"bubble {t.bubble_fraction:.1%}, rank 0 holds {held:g} microbatches at most."
