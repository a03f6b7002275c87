"""Chapter 13's checkers: 13.2 reads whole names and torch's own objects; the DTensor plans of
13.4 (the Megatron MLP) and 13.7 (the block with a LayerNorm, tokens split outside it) run on 4
and 2 gloo processes at two sizes each, against one process, their collectives counted exactly.
Right plans pass (``use_local_output=False`` too); wrong ones a learner would write fail with a
message that names the mistake; the library's own plans are refused by name."""

import pytest
from checking import fails

import tpviz
from tpviz.pytorch import shard

torch = pytest.importorskip("torch")
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import Partial, Replicate, Shard  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
)

ex = tpviz.exercises


# --- 13.2 whole names, torch's own objects -------------------------------------------------------
RIGHT = {"make_mesh": "init_device_mesh", "P('x', None)": "Shard(0)", "P()": "Replicate()",
         "an unreduced sum": "Partial()", "psum": "funcol.all_reduce"}


def test_jax_to_torch_accepts_torchs_objects_strs_and_reprs(capsys):
    import torch.distributed._functional_collectives as funcol

    for answer in (RIGHT,
                   {"make_mesh": init_device_mesh, "P('x', None)": Shard(0), "P()": Replicate(),
                    "an unreduced sum": Partial(), "psum": funcol.all_reduce},
                   {**RIGHT, "P('x', None)": str(Shard(0)), "an unreduced sum": str(Partial())},
                   {**RIGHT, "P('x', None)": repr(Shard(0)), "an unreduced sum": repr(Partial())}):
        ex.check_jax_to_torch(answer)
        assert "✓" in capsys.readouterr().out
    assert str(Shard(0)) == "S(0)" and repr(Shard(0)) == "Shard(dim=0)"


def test_jax_to_torch_refuses_substring_tricks():
    every = "init_device_mesh Shard(0) Replicate() Partial() all_reduce"
    fails(ex.check_jax_to_torch, dict.fromkeys(RIGHT, every), words="5 of the 5")
    fails(ex.check_jax_to_torch, {**RIGHT, "P()": "not Replicate()"}, words="one entry")
    fails(ex.check_jax_to_torch, {**RIGHT, "P()": Shard(0), "P('x', None)": Replicate()},
          words="2 of the 5")

    def init_device_mesh_():  # a function of the notebook's, named like torch's
        pass

    init_device_mesh_.__name__ = "init_device_mesh"
    fails(ex.check_jax_to_torch, {**RIGHT, "make_mesh": init_device_mesh_}, words="one entry")


# --- 13.4 the Megatron MLP's plan ------------------------------------------------------------
TP_WRONG = {
    "library": (shard.megatron_plan, r"write what `tpviz\.pytorch\.shard\.megatron_plan`"),
    "both column-parallel": ({"0": ColwiseParallel(), "2": ColwiseParallel()}, "fails|differs"),
    "swapped": ({"0": RowwiseParallel(), "2": ColwiseParallel()}, "fails|differs"),
    "first only": ({"0": ColwiseParallel()}, "fails|differs|right values"),
    "hidden gathered": ({"0": ColwiseParallel(output_layouts=Replicate(), use_local_output=False),
                         "2": RowwiseParallel()}, "right values, but the step issues"),
    "output split": ({"0": ColwiseParallel(), "2": RowwiseParallel(output_layouts=Shard(1))},
                     "shape"),
}


@pytest.mark.slow
def test_tp_plan_passes_with_either_output(capsys):
    ex.check_tp_plan({"0": ColwiseParallel(), "2": RowwiseParallel()})
    ex.check_tp_plan({"0": ColwiseParallel(), "2": RowwiseParallel(use_local_output=False)})
    out = capsys.readouterr().out
    assert out.count("✓") == 2 and "on 4 and 2 processes at 2 sizes each" in out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TP_WRONG))
def test_tp_plan_rejects_wrong_plans(name):
    plan, words = TP_WRONG[name]
    fails(ex.check_tp_plan, plan() if callable(plan) else plan, words=words)


# --- 13.7 the block with a LayerNorm, tokens split outside ----------------------------------------
def sp_plan():  # the book's solution
    return {"0": SequenceParallel(), "1": ColwiseParallel(input_layouts=Shard(1)),
            "3": RowwiseParallel(output_layouts=Shard(1))}


SP_WRONG = {
    "library": (lambda: (lambda lib: {"0": SequenceParallel(), "1": lib["0"], "3": lib["2"]})(
        shard.sequence_parallel_plan()),
                r"write what `tpviz\.pytorch\.shard\.sequence_parallel_plan`"),
    "no SequenceParallel on the norm": (
        lambda: {"1": ColwiseParallel(input_layouts=Shard(1)),
                 "3": RowwiseParallel(output_layouts=Shard(1))},
        r"gradient of 0\.weight differs .* never added"),
    "Megatron's plan": (lambda: {"0": SequenceParallel(), "1": ColwiseParallel(),
                                 "3": RowwiseParallel()}, "fails|shape|differs"),
    "output whole": (lambda: {"0": SequenceParallel(),
                              "1": ColwiseParallel(input_layouts=Shard(1)),
                              "3": RowwiseParallel()}, "shape"),
    "hidden gathered": (lambda: {"0": SequenceParallel(),
                                 "1": ColwiseParallel(input_layouts=Shard(1),
                                                      output_layouts=Replicate()),
                                 "3": RowwiseParallel(output_layouts=Shard(1))},
                        "fails|differs|right values, but"),
    "layer names of 13.4": (lambda: {"0": ColwiseParallel(input_layouts=Shard(1)),
                                     "2": RowwiseParallel(output_layouts=Shard(1))},
                            "does not use|unknown|not one of|'2'"),
}


@pytest.mark.slow
def test_sp_plan_passes(capsys):
    ex.check_sp_plan(sp_plan())
    ex.check_sp_plan({**sp_plan(), "3": RowwiseParallel(output_layouts=Shard(1),
                                                        use_local_output=False)})
    out = capsys.readouterr().out
    assert out.count("✓") == 2 and "'all-gather': 1, 'reduce-scatter': 1" in out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SP_WRONG))
def test_sp_plan_rejects_wrong_plans(name):
    plan, words = SP_WRONG[name]
    fails(ex.check_sp_plan, plan(), words=words)
