"""Review of chapter 13's build checkers (issue 39's mutation pass): the DTensor plan of the
Megatron MLP (13.4) and sequence parallelism around it (13.7), each run on 4 and 2 gloo processes.
The right plans pass; wrong plans written as a learner would (the library's plan deep-copied,
the hidden gathered before the row-parallel layer, a partial output, the tokens kept split into
the first linear layer, the output split on the batch) fail. Plans not repeated from
tests/test_ex_pytorch.py."""

import copy

import pytest
from checking import fails, passes

import tpviz

torch = pytest.importorskip("torch")
from torch.distributed.tensor import Partial, Replicate, Shard  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
)

from tpviz.pytorch import shard  # noqa: E402 (imports torch)

ex = tpviz.exercises

# --- 13.4 the Megatron MLP's plan --------------------------------------------------------------
TP_WRONG = {
    "the library's plan deep-copied": (lambda: copy.deepcopy(shard.megatron_plan()),
                                       r"write what `tpviz\.pytorch\.shard\.megatron_plan`"),
    "hidden gathered for the second layer": (
        lambda: {"0": ColwiseParallel(), "2": RowwiseParallel(input_layouts=Replicate())},
        "fails|differs|right values, but"),
    "output left partial": (
        lambda: {"0": ColwiseParallel(), "2": RowwiseParallel(output_layouts=Partial())},
        r"the output differs from one process's\.(?!\.)"),
    "only the second layer split": (lambda: {"2": RowwiseParallel()}, "fails|differs|shape"),
}


@pytest.mark.slow
def test_tp_plan_right_program_passes(capsys):
    passes(ex.check_tp_plan, {"0": ColwiseParallel(), "2": RowwiseParallel()}, capsys=capsys)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TP_WRONG))
def test_tp_plan_wrong_program_fails(name):
    plan, words = TP_WRONG[name]
    fails(ex.check_tp_plan, plan(), words=words)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="a plan is a value made before the check: the library's "
                   "styles with their mark removed are torch's own ColwiseParallel() and "
                   "RowwiseParallel(), which is also the right answer typed out")
def test_tp_plan_library_with_its_mark_removed_fails():
    plan = shard.megatron_plan()
    for style in plan.values():
        vars(style).pop("_tpviz_book", None)
    fails(ex.check_tp_plan, plan, words="megatron_plan")


# --- 13.7 sequence parallelism around the MLP --------------------------------------------------
def sp_plan():
    return {"0": SequenceParallel(), "1": ColwiseParallel(input_layouts=Shard(1)),
            "3": RowwiseParallel(output_layouts=Shard(1))}


SP_WRONG = {
    "the library's plan deep-copied": (lambda: {"0": SequenceParallel(), **{
        {"0": "1", "2": "3"}[k]: s for k, s in copy.deepcopy(shard.sequence_parallel_plan())
        .items() if k in ("0", "2")}}, r"write what `tpviz\.pytorch\.shard\."),
    "first linear takes the norm's output as whole": (
        lambda: {**sp_plan(), "1": ColwiseParallel()}, "fails|differs|shape|right values, but"),
    "output split on the batch": (
        lambda: {**sp_plan(), "3": RowwiseParallel(output_layouts=Shard(0))},
        r"outputs of shapes .* do not put back together along the sequence"),
    "norm split over the hidden dimension": (
        lambda: {**sp_plan(), "0": SequenceParallel(sequence_dim=2)},
        "fails|differs|shape|right values, but"),
    "norm replicated, tokens gathered by the first layer": (
        lambda: {"0": SequenceParallel(use_local_output=True),
                 "1": ColwiseParallel(input_layouts=Replicate()),
                 "3": RowwiseParallel(output_layouts=Shard(1))},
        "fails|differs|shape|right values, but"),
}


@pytest.mark.slow
def test_sp_plan_right_program_passes(capsys):
    passes(ex.check_sp_plan, sp_plan(), capsys=capsys)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SP_WRONG))
def test_sp_plan_wrong_program_fails(name):
    plan, words = SP_WRONG[name]
    fails(ex.check_sp_plan, plan(), words=words)
