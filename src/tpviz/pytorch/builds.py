"""The PyTorch chapter's build checkers: a learner's DTensor plan (``parallelize_module``'s dict
of ``ParallelStyle``s) run on gloo processes, 4 and then 2 of them, at two sizes each, against
one process: outputs, the input's gradient, every weight's gradient, and the collectives
``CommDebugMode`` counts in the forward and in the backward, exactly. The Megatron MLP (13.4:
the learner's own column-wise style, :func:`check_colwise_style`); the same block with a
LayerNorm and its tokens split outside it (13.7, sequence parallelism: the learner's own style
for the norm, :func:`check_sequence_style`). The old dict checkers stay for the contract.

A plan is a value made in the notebook, so the library's own plans cannot be put out of reach
while it is made; instead :mod:`tpviz.pytorch.shard` marks the styles its plans are made of,
and a plan holding one is refused by name."""

from __future__ import annotations

import numpy as np

from tpviz.core.exercises import NotAttempted, Wrong, checker, only_keys
from tpviz.errors import ArgumentTypeError, WorkerError
from tpviz.pytorch import ship

LAUNCH_TIMEOUT = 60.0
WORLDS = (4, 2)
MARK = "_tpviz_book"  # set on the styles of the library's own plans (shard.megatron_plan, …)

MLP = dict(kind="mlp", keys=("0", "2"), sizes=((8, 32, 8), (12, 16, 6)),
           forward={"all-reduce": 1}, backward={"all-reduce": 1})
SP = dict(kind="sp", keys=("0", "1", "3"), sizes=((8, 32, 8), (12, 16, 12)),
          forward={"all-gather": 1, "reduce-scatter": 1},
          backward={"all-gather": 1, "reduce-scatter": 1})

# 13.7's own style for the LayerNorm: besides SP's values and counts, the norm's layouts (below)
SEQ = dict(SP, norm={"out": "(Shard(dim=1),)", "params": "(Replicate(),)",
                     "grads": "(Partial(sum),)", "reduce": {"all-reduce": 2}})


def _seq_bytes(h: int, t: int, n: int) -> dict:
    """The bytes of each rank's input to each collective in 13.7 (float32; on the wire a ring
    sends N - 1 times an all-gather's input and (N - 1)/N of a reduce-scatter's or, twice, an
    all-reduce's): each step all-gathers its T/N tokens
    (forward: the norm's output; backward: the output's gradient) and reduce-scatters a whole
    [1, T, H] partial sum (forward: layer "3"'s output; backward: layer "1"'s input gradient);
    each of the norm's gradients is an all-reduce of its H values."""
    step = sorted([("all-gather", t // n * h * 4), ("reduce-scatter", t * h * 4)])
    return {"forward": step, "backward": step, "norm": [("all-reduce", h * 4)] * 2}


def _shape_hint(kind: str) -> str:
    return ("Each rank keeps its own tokens outside the block: its input and its output are "
            "[1, T/N, H]." if kind == "sp" else
            "The MLP must return the whole [1, T, H] output on every rank.")


def _compare(kind: str, got: dict, ref: dict) -> str | None:
    """What differs between a run and the one-process reference, in words, or None."""
    if got["out"].shape != ref["out"].shape:
        return (f"the output, put together from the ranks, has shape {got['out'].shape}; one "
                f"process's is {ref['out'].shape}. {_shape_hint(kind)}")
    if not np.allclose(got["out"], ref["out"], atol=1e-5):
        return "the output differs from one process's."
    if got["x_grad"].shape != ref["x_grad"].shape or not np.allclose(
            got["x_grad"], ref["x_grad"], atol=1e-5):
        return "the gradient of the input differs from one process's."
    for name, g in ref["grads"].items():
        if name not in got["grads"] or not np.allclose(got["grads"][name], g, atol=1e-5):
            return (f"the gradient of {name} differs from one process's (each rank holds only "
                    "part of it, and the parts are never added)" if kind == "sp" and
                    name.startswith("0.") else f"the gradient of {name} differs from one "
                    "process's")
    return None


def _norm_mistake(found: dict, want: dict, tokens: tuple) -> str | None:
    """What is wrong with the LayerNorm's layouts (:func:`blocks._norm`), in words, or None."""
    kind, placed, shape = found["out"] or ("nothing", None, ())
    if kind != "DTensor":
        return (f'the LayerNorm hands layer "1" a {kind} of shape {shape}, not a DTensor: '
                "hand on this rank's tokens as a DTensor sharded on the sequence (Shard(1))")
    if (placed, shape) != (want["out"], tokens):
        return (f'the LayerNorm hands layer "1" a DTensor placed {placed}, its local part '
                f"{shape}; hand on this rank's tokens, {tokens}, sharded on the sequence "
                "(Shard(1)): gathering them is ColwiseParallel's work")
    for key, placements in found["params"].items():
        if placements != want["params"]:
            now = f"placed {placements}" if placements else "a plain tensor"
            return (f"the LayerNorm's {key} is {now}; make it a DTensor replicated on every "
                    "rank (Replicate())")
    if set(found["grads"].values()) != {want["grads"]} or found["reduce"] != want["reduce"]:
        return (f"after the backward the LayerNorm's gradients are placed {found['grads']}, "
                f"and making them whole issues {found['reduce']}; each should be this rank's "
                f"share, {want['grads']}, summed by one all-reduce ({want['reduce']} in all)")
    return None


def grade_plan(plan, exercise: dict, hint: str, barred: tuple = ()) -> str:
    """Run ``plan`` for ``exercise`` (:data:`MLP` or :data:`SP`) on each of :data:`WORLDS`
    processes at each of its sizes; the ✓ words, or :class:`Wrong`. ``barred``: dotted names
    of library code the workers may not run while they do (:func:`blocks.run`)."""
    if not isinstance(plan, dict) or not plan:
        raise Wrong(f"give a dict from layer names {exercise['keys']} to parallel styles.")
    if any(not ship.importable(type(s)) for s in plan.values()):  # a style of your own
        extra = [k for k in plan if k not in exercise["keys"]]
        if extra:
            raise Wrong(f"your plan has key {extra[0]!r}, which this exercise does not use.")
    else:
        only_keys(plan, list(exercise["keys"]), "your plan")  # before starting processes
    book = next((getattr(s, MARK) for s in plan.values() if getattr(s, MARK, None)), None)
    if book:
        raise Wrong(f"this exercise asks you to write what `{book}` does, and your plan is "
                    "made of its styles. Write the styles yourself.")
    from tpviz.pytorch import blocks  # torch: imported once the answer is worth running
    from tpviz.pytorch.check import launch_timed

    kind, sizes = exercise["kind"], exercise["sizes"]
    try:
        shipped = ship.pack_plan(plan)  # styles written in a notebook travel as their code
    except ArgumentTypeError as e:
        raise Wrong(str(e)) from None
    done = []
    for world in WORLDS:
        try:
            ranks, _ = launch_timed(blocks.run, world, shipped, kind, sizes, 0, tuple(barred),
                                    timeout=LAUNCH_TIMEOUT)
        except WorkerError as e:
            if "NotImplementedError" in str(e).split("\n")[0]:  # the release's stub
                raise NotAttempted from None
            if " raised Unavailable: " in str(e).split("\n")[0]:  # torch's own, called
                raise Wrong(str(e).split("\n")[0].split(" raised Unavailable: ", 1)[1]) from None
            first = str(e).split("\n")[0].split("raised ", 1)[-1][:200]
            said = f"right on {done[0]}, but " if done else ""
            raise Wrong(f"{said}on {world} processes the plan fails: {first}", hint) from None
        for k, (h, f, t) in enumerate(sizes):
            where = f"{world} processes with H = {h}, F = {f}, T = {t}"
            try:
                got = blocks.join(kind, ranks, k)
            except ValueError:  # the ranks' outputs do not line up along the sequence
                shapes = sorted({tuple(r[k]["out"].shape) for r in ranks})
                raise Wrong(f"on {where}: the ranks return outputs of shapes {shapes}, which "
                            f"do not put back together along the sequence. {_shape_hint(kind)}",
                            hint) from None
            mistake = _compare(kind, got, blocks.reference(kind, h, f, t))
            if mistake is None and "norm" in exercise:
                mistake = _norm_mistake(got["norm"], exercise["norm"], (1, t // world, h))
            found = {"forward": got["forward"], "backward": got["backward"]}
            want = {"forward": exercise["forward"], "backward": exercise["backward"]}
            if mistake is None and found != want:
                mistake = (f"right values, but the step issues {found}; the exercise needs "
                           f"{want} and no others")
            if mistake is None and "norm" in exercise:
                sent = {**got["sent"], "norm": got["norm"]["sent"]}
                if sent != _seq_bytes(h, t, world):
                    mistake = (f"the right collectives, but each rank hands them {sent} "
                               f"(kind, bytes of its input); the block's tensors are float32, "
                               f"[1, {t}, {h}] in all")
            if mistake:
                said = (f"right on {done[0]}, but on {where}: " if done else f"on {where}: ")
                raise Wrong(said + mistake.rstrip(".") + ".", hint)
            done.append(where)
    return (f"the step issues {exercise['forward']} forward and {exercise['backward']} backward, "
            f"equal to one process on 4 and 2 processes at {len(sizes)} sizes each.")


@checker("The DTensor plan of the Megatron MLP")
def check_tp_plan(tp_plan) -> str:
    """``tp_plan``: ``parallelize_module``'s dict for ``Linear(H, F), GELU, Linear(F, H)``
    (layers "0" and "2"), run on 4 and 2 processes at two sizes against one process; exactly
    one all-reduce forward (g) and one backward (f)."""
    words = grade_plan(tp_plan, MLP, "Which layer should receive a whole input, and which a "
                       "sharded one, so that the activation stays sharded between them?")
    return "Column-parallel, then row-parallel: f and g, nothing else; " + words


@checker("Tensor and sequence parallelism for a block with a LayerNorm")
def check_sp_plan(sp_plan) -> str:
    """``sp_plan``: ``parallelize_module``'s dict for ``LayerNorm(H), Linear(H, F), GELU,
    Linear(F, H)`` (layers "0", "1", "3") whose tokens stay split over the ranks outside the
    block (each rank's input and output ``[1, T/N, H]``); on 4 and 2 processes at two sizes,
    against one process, with exactly one all-gather and one reduce-scatter each way."""
    words = grade_plan(sp_plan, SP, "Where does the block need every token, and where only this "
                       "rank's? The LayerNorm's weights see every rank's tokens too.")
    return "Sequence parallelism around Megatron's MLP: " + words


# torch's column-wise style, which the learner's ``_apply`` may not hand its work to (by calling
# ``ColwiseParallel()._apply``, its hooks, or ``shard.megatron_plan()["0"]``) in the workers
BARRED = ("torch.distributed.tensor.parallel.style.ColwiseParallel",)


def _own_style(cls, torch_style: str = "ColwiseParallel", what: str = "column-wise") -> None:
    """Refuse what is not a ``what`` style of the learner's own (one that is or inherits torch's
    ``torch_style``, or has no ``_apply``), before any process starts."""
    from torch.distributed.tensor import parallel
    from torch.distributed.tensor.parallel import ParallelStyle

    theirs = getattr(parallel, torch_style)
    if not isinstance(cls, type) or not issubclass(cls, ParallelStyle):
        raise Wrong(f"give your class (a subclass of torch's `ParallelStyle`), not {cls!r}.")
    if issubclass(cls, theirs):
        raise Wrong(f"this is torch's own `{torch_style}`"
                    + ("" if cls is theirs else f" (`{cls.__name__}` inherits it)")
                    + f": the exercise asks you to write the {what} style yourself, as a "
                    "subclass of `ParallelStyle` with its own `_apply`.")
    if cls._apply is ParallelStyle._apply or cls.__module__.startswith("torch."):
        raise Wrong(f"`{cls.__name__}` does not define its own `_apply(module, device_mesh)`.")


@checker("A column-wise ParallelStyle of your own")
def check_colwise_style(ColumnParallel) -> str:
    """``ColumnParallel``: the learner's ``ParallelStyle`` for the first ``Linear(H, F)`` of
    the Megatron MLP, used as ``{"0": ColumnParallel(), "2": RowwiseParallel()}``; run on 4
    and 2 processes at two sizes against one process, exactly one all-reduce forward (g, in
    torch's RowwiseParallel) and one backward (f, the learner's replicated input)."""
    _own_style(ColumnParallel)
    from torch.distributed.tensor.parallel import RowwiseParallel

    words = grade_plan({"0": ColumnParallel(), "2": RowwiseParallel()}, MLP,
                       "The weight and the bias are split along F; the input is whole on "
                       "every rank; the output stays split along its last dimension, as "
                       "RowwiseParallel expects its input.", barred=BARRED)
    return f"Your column-wise style, then torch's RowwiseParallel: f and g, nothing else; {words}"


# torch's sequence-parallel style, barred in the workers while the learner's runs (13.7)
BARRED_SP = ("torch.distributed.tensor.parallel.style.SequenceParallel",)


@checker("A sequence-parallel ParallelStyle of your own")
def check_sequence_style(SequenceStyle) -> str:
    """``SequenceStyle``: the learner's ``ParallelStyle`` for the ``LayerNorm(H)`` of
    ``LayerNorm, Linear(H, F), GELU, Linear(F, H)``, used as ``{"0": SequenceStyle(), "1":
    ColwiseParallel(input_layouts=Shard(1)), "3": RowwiseParallel(output_layouts=Shard(1))}``
    with each rank's tokens ``[1, T/N, H]`` in and out; on 4 and 2 processes at two sizes
    against one process (output, input gradient, every weight gradient, the norm's included).

    Collectives, exactly (``CommDebugMode``, torch 2.13): forward one all-gather (layer "1"
    gathers the tokens, Shard(1) to Replicate) and one reduce-scatter (layer "3"'s partial sums
    to this rank's tokens); backward their transposes, one all-gather (of the output's gradient)
    and one reduce-scatter (of the partial input gradient of layer "1"), nothing else. The
    norm's gradients dL/dγ = Σ_t g_t·x̂_t and dL/dβ = Σ_t g_t sum over all T tokens and each
    rank saw T/N of them: the backward leaves each a ``Partial(sum)`` DTensor (torch defers
    the sum) and making it whole issues one all-reduce of H values, two in all (γ and β),
    counted apart from the step. The bytes of each rank's input to each of them, exactly
    (:func:`_seq_bytes`). Also checked: the norm hands layer "1" a ``Shard(1)`` DTensor of
    this rank's tokens, and its weights are ``Replicate()`` DTensors."""
    _own_style(SequenceStyle, "SequenceParallel", "sequence-parallel")
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {"0": SequenceStyle(), "1": ColwiseParallel(input_layouts=Shard(1)),
            "3": RowwiseParallel(output_layouts=Shard(1))}
    words = grade_plan(plan, SEQ, "The norm's weights are whole on every rank; its input is "
                       "this rank's tokens; its output stays split on the sequence.",
                       barred=BARRED_SP)
    (h, _, t), n = SEQ["sizes"][0], WORLDS[0]
    sent = _seq_bytes(h, t, n)  # what every run sent, or the check would have failed
    return ("Your sequence-parallel norm, then torch's column- and row-wise layers; the norm's "
            f"gradients summed by {SEQ['norm']['reduce']}; {words} Each rank hands each step's "
            f"collectives {sent['forward']} (kind, bytes of its input) at H = {h}, T = {t} on {n} "
            "processes, and "
            f"{sent['norm'][0][1]} bytes per norm gradient.")
