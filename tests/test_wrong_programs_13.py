"""Review of chapter 13's build checkers (issue 39's mutation pass): the DTensor plan of the
Megatron MLP (13.4) and sequence parallelism around it (13.7), each run on 4 and 2 gloo processes.
The right plans pass; wrong plans written as a learner would (the library's plan deep-copied,
the hidden gathered before the row-parallel layer, a partial output, the tokens kept split into
the first linear layer, the output split on the batch) fail. Plans not repeated from
tests/test_ex_pytorch.py. 13.4 now asks for the learner's own column-wise ``ParallelStyle``
(``check_colwise_style``): torch's ColwiseParallel or a subclass, no ``_apply``, the weight
whole, the output gathered, an extra all-gather, and a style right on 4 processes only all
fail; the old ``check_tp_plan`` is kept for the contract. 13.7 likewise asks for the learner's own
sequence-parallel style for the LayerNorm (``check_sequence_style``); ``check_sp_plan`` is kept.
A second reviewer's 13.7 programs: torch's hooks named directly, the sequence hard-coded as 4
slices, the norm run on local tensors, the features or the batch taken as split, the output split
on the batch all fail; the global shape taken from the mesh passes."""

import copy

import pytest
from checking import fails, passes, stub

import tpviz

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.distributed.tensor import (  # noqa: E402
    DTensor,
    Partial,
    Replicate,
    Shard,
    distribute_module,
    distribute_tensor,
)
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    ParallelStyle,
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
def test_tp_plan_library_with_its_mark_removed_fails():
    """The library's plan with its mark removed is torch's own ColwiseParallel, which 13.4's
    checker refuses where the learner's style is asked (before any process starts)."""
    plan = shard.megatron_plan()
    for style in plan.values():
        vars(style).pop("_tpviz_book", None)
    fails(ex.check_colwise_style, type(plan["0"]), words="torch's own `ColwiseParallel`")


# --- 13.4 the learner's own column-wise style ---------------------------------------------------
class Mine(ParallelStyle):
    """A column-wise ParallelStyle as a learner writes it, its choices as class attributes
    (:func:`style`): the weight's and the bias's placements, the input's, what the output is
    redistributed to before ``to_local`` (``give``), the mesh size it splits on (``only_on``;
    others: everything whole)."""

    params, bias, give, only_on = Shard(0), Shard(0), None, None

    def _apply(self, module, device_mesh):
        style = self

        def part(name, layer, mesh):
            whole = style.only_on is not None and mesh.size() != style.only_on
            for key, p in list(layer.named_parameters(recurse=False)):
                at = Replicate() if whole else (style.params if key == "weight" else style.bias)
                layer.register_parameter(key, nn.Parameter(distribute_tensor(p.detach(), mesh,
                                                                             [at])))

        def inp(layer, inputs, mesh):
            return DTensor.from_local(inputs[0], mesh, [Replicate()], run_check=False)

        def out(layer, y, mesh):
            for placements in style.give or ():
                y = y.redistribute(mesh, placements)
            return y.to_local()

        return distribute_module(module, device_mesh, part, inp, out)


def style(**choices):
    return type("Mine", (Mine,), choices)


class BookColumn(ParallelStyle):  # the book's solution, in another learner's words
    def _apply(self, module, device_mesh):
        def split_rows(name, layer, mesh):
            for key, param in list(layer.named_parameters(recurse=False)):
                rows = distribute_tensor(param.detach(), mesh, [Shard(0)])
                layer.register_parameter(key, nn.Parameter(rows))

        def whole_input(layer, inputs, mesh):
            x = inputs[0]
            if not isinstance(x, DTensor):
                x = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
            return (x, *inputs[1:])

        return distribute_module(module, device_mesh, split_rows, whole_input,
                                 lambda layer, out, mesh: out.to_local())


class Inherits(ColwiseParallel):
    pass


STYLE_WRONG = {
    "torch's own ColwiseParallel": (lambda: ColwiseParallel, "torch's own `ColwiseParallel`"),
    "a subclass of ColwiseParallel": (lambda: Inherits, "`Inherits` inherits it"),
    "no _apply of its own": (lambda: type("Empty", (ParallelStyle,), {}),
                             "does not define its own `_apply"),
    "the weight and bias whole": (lambda: style(params=Replicate(), bias=Replicate()),
                                  "plan fails|differs|shape"),
    "the output gathered": (lambda: style(give=([Replicate()],)), "plan fails|differs|shape"),
    "the output gathered and split again": (
        lambda: style(give=([Replicate()], [Shard(-1)])),
        r"right values, but the step issues .*all-gather"),
    "right on 4 processes only": (lambda: style(only_on=4),
                                  r"right on 4 processes .*, but on 2 processes"),
}


@pytest.mark.slow
def test_colwise_style_book_solution_passes(capsys):
    passes(ex.check_colwise_style, BookColumn, capsys=capsys)


@pytest.mark.slow
def test_colwise_style_variant_passes(capsys):
    passes(ex.check_colwise_style, style(), capsys=capsys)


@pytest.mark.slow
def test_colwise_style_with_the_bias_whole_passes(capsys):
    """A whole bias on every rank: DTensor adds this rank's slice of it to the split output,
    and its gradient needs no collective; the same values and collectives, so it passes."""
    passes(ex.check_colwise_style, style(bias=Replicate()), capsys=capsys)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STYLE_WRONG))
def test_colwise_style_wrong_program_fails(name):
    cls, words = STYLE_WRONG[name]
    fails(ex.check_colwise_style, cls(), words=words)


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


# --- 13.4 review (rev13): more of a learner's column-wise styles --------------------------------
class Delegates(ParallelStyle):  # a library shortcut: torch's style does the work, not inherited
    def _apply(self, module, device_mesh):
        return ColwiseParallel()._apply(module, device_mesh)


class BookPlanInside(ParallelStyle):  # tpviz's own plan, its first style, called inside _apply
    def _apply(self, module, device_mesh):
        return shard.megatron_plan()["0"]._apply(module, device_mesh)


class Swallows(ParallelStyle):  # tries torch's style, falls back to its own if refused
    def _apply(self, module, device_mesh):
        try:
            return ColwiseParallel()._apply(module, device_mesh)
        except BaseException:
            return BookColumn()._apply(module, device_mesh)


def _rows(name, layer, mesh):
    for key, p in list(layer.named_parameters(recurse=False)):
        layer.register_parameter(key, nn.Parameter(distribute_tensor(p.detach(), mesh,
                                                                     [Shard(0)])))


class Custom(ParallelStyle):
    """Weight and bias split on F (by a helper at the module's top level, which travels by its
    code), the input taken as ``inp``, the output handed on by ``give``."""

    inp, give = None, staticmethod(lambda m, o, mesh: o.to_local())

    def _apply(self, module, device_mesh):
        def take(m, i, mesh):
            return DTensor.from_local(i[0], mesh, [self.inp or Replicate()], run_check=False)
        return distribute_module(module, device_mesh, _rows, take, self.give)


def _custom(give, inp=None):
    return type("Custom", (Custom,), {"give": staticmethod(give), "inp": inp})


class RowWeight(ParallelStyle):  # the weight split on H (dim 1), as a row-wise layer's
    def _apply(self, module, device_mesh):
        def part(name, layer, mesh):
            for key, at in (("weight", Shard(1)), ("bias", Shard(0))):
                p = getattr(layer, key).detach()
                layer.register_parameter(key, nn.Parameter(distribute_tensor(p, mesh, [at])))
        return distribute_module(module, device_mesh, part,
                                 lambda m, i, mesh: DTensor.from_local(i[0], mesh, [Replicate()]),
                                 lambda m, o, mesh: o.to_local())


class PlainSlices(ParallelStyle):  # this rank's rows as plain tensors, no DTensor anywhere
    def _apply(self, module, device_mesh):
        def part(name, layer, mesh):
            n, r = mesh.size(), mesh.get_local_rank()
            for key, p in list(layer.named_parameters(recurse=False)):
                rows = p.shape[0] // n
                layer.register_parameter(key, nn.Parameter(p.detach()[r * rows:(r + 1) * rows]))
        return distribute_module(module, device_mesh, part)


class FromLocalRows(ParallelStyle):  # right: torch.chunk and DTensor.from_local, not distribute
    def _apply(self, module, device_mesh):
        def part(name, layer, mesh):
            n, r = mesh.size(), mesh.get_local_rank()
            for key, p in list(layer.named_parameters(recurse=False)):
                rows = torch.chunk(p.detach(), n)[r].contiguous()
                layer.register_parameter(key, nn.Parameter(DTensor.from_local(rows, mesh,
                                                                              [Shard(0)])))
        return distribute_module(module, device_mesh, part,
                                 lambda m, i, mesh: DTensor.from_local(i[0], mesh, [Replicate()]),
                                 lambda m, o, mesh: o.to_local())


CALLS_TORCH = "your code called it"
STYLE_WRONG_REVIEW = {
    "ColwiseParallel()._apply called": (Delegates, CALLS_TORCH),
    "the library plan's style called": (BookPlanInside, CALLS_TORCH),
    "torch's style tried, its refusal caught": (Swallows, CALLS_TORCH),
    "the weight split on H": (RowWeight, r"right values, but the step issues .*all-gather"),
    "the input taken as split tokens": (_custom(lambda m, o, mesh: o.to_local(), Shard(1)),
                                        r"has shape \(1, 32, 8\); one process's is \(1, 8, 8\)"),
    "the output split on the tokens": (
        _custom(lambda m, o, mesh: o.redistribute(mesh, [Shard(1)]).to_local()),
        "plan fails"),
    "plain local slices": (PlainSlices, "plan fails: RuntimeError: .*mixed torch.Tensor"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STYLE_WRONG_REVIEW))
def test_colwise_style_review_wrong_program_fails(name):
    cls, words = STYLE_WRONG_REVIEW[name]
    fails(ex.check_colwise_style, cls, words=words)


@pytest.mark.slow
def test_colwise_style_from_local_rows_passes(capsys):
    passes(ex.check_colwise_style, FromLocalRows, capsys=capsys)


@pytest.mark.slow
def test_colwise_style_output_left_a_dtensor_passes(capsys):
    """``use_local_output=False``: the hidden stays a ``Shard(-1)`` DTensor, which torch's
    RowwiseParallel takes as it is; the same values and collectives, so it passes."""
    passes(ex.check_colwise_style, _custom(lambda m, o, mesh: o), capsys=capsys)


# --- 13.7 the learner's own sequence-parallel style for the LayerNorm ---------------------------
class SeqMine(ParallelStyle):
    """A sequence-parallel ParallelStyle as a learner writes it, its choices as class attributes
    (:func:`seq_style`): the norm's weights' placement (``None``: left to ``distribute_module``), the
    input's, what the output is redistributed to (``give``), whether it is handed on as a plain
    tensor (``local``), the mesh size it is right on (``only_on``; others: the input whole)."""

    params, inp, give, local, only_on = Replicate(), Shard(1), None, False, None

    def _apply(self, module, device_mesh):
        style = self

        def part(name, layer, mesh):
            for key, p in list(layer.named_parameters(recurse=False)):
                if style.params is not None:
                    p = nn.Parameter(DTensor.from_local(p.detach(), mesh, [Replicate()]))
                    if style.params != Replicate():
                        p = nn.Parameter(distribute_tensor(p.detach().full_tensor(), mesh,
                                                           [style.params]))
                layer.register_parameter(key, p)

        def inp(layer, inputs, mesh):
            wrong = style.only_on is not None and mesh.size() != style.only_on
            at = Replicate() if wrong else style.inp
            return DTensor.from_local(inputs[0], mesh, [at], run_check=False)

        def out(layer, y, mesh):
            for placements in style.give or ():
                y = y.redistribute(mesh, placements)
            return y.to_local() if style.local else y

        return distribute_module(module, device_mesh, part, inp, out)


def seq_style(**choices):
    return type("SeqMine", (SeqMine,), choices)


class BookSequence(ParallelStyle):  # the book's solution, in another learner's words
    def _apply(self, module, device_mesh):
        def whole_weights(name, layer, mesh):
            for key, param in list(layer.named_parameters(recurse=False)):
                both = distribute_tensor(param.detach(), mesh, [Replicate()])
                layer.register_parameter(key, nn.Parameter(both))

        def tokens(layer, inputs, mesh):
            x = inputs[0]
            if not isinstance(x, DTensor):
                x = DTensor.from_local(x, mesh, [Shard(1)], run_check=False)
            return (x, *inputs[1:])

        return distribute_module(module, device_mesh, whole_weights, tokens)


class InheritsSP(SequenceParallel):
    pass


class DelegatesSP(ParallelStyle):  # torch's style called inside _apply, not inherited
    def _apply(self, module, device_mesh):
        return SequenceParallel()._apply(module, device_mesh)


class SwallowsSP(ParallelStyle):  # tries torch's style, falls back to its own if refused
    def _apply(self, module, device_mesh):
        try:
            return SequenceParallel()._apply(module, device_mesh)
        except BaseException:
            return BookSequence()._apply(module, device_mesh)


SEQ_WRONG = {
    "torch's own SequenceParallel": (SequenceParallel, "torch's own `SequenceParallel`"),
    "a subclass of SequenceParallel": (InheritsSP, "`InheritsSP` inherits it"),
    "no _apply of its own": (type("Empty", (ParallelStyle,), {}),
                             "does not define its own `_apply"),
    "SequenceParallel()._apply called": (DelegatesSP, CALLS_TORCH),
    "torch's style tried, its refusal caught": (SwallowsSP, CALLS_TORCH),
    "the norm's weights sharded on H": (seq_style(params=Shard(0)),
                                        r"LayerNorm's weight is placed \(Shard\(dim=0\),\)"),
    "the output handed on whole": (seq_style(give=([Replicate()],)),
                                   r'hands layer "1" a DTensor placed \(Replicate\(\),\)'),
    "the output handed on as a plain tensor": (
        seq_style(local=True), r'hands layer "1" a tensor of shape \(1, 2, 8\), not a DTensor'),
    "the input taken as whole tokens": (seq_style(inp=Replicate()),
                                        "output, put together from the ranks, has shape"),
    "right on 4 processes only": (seq_style(only_on=4),
                                  r"right on 4 processes .*, but on 2 processes"),
}


@pytest.mark.slow
def test_sequence_style_book_solution_passes(capsys):
    passes(ex.check_sequence_style, BookSequence, capsys=capsys)


@pytest.mark.slow
def test_sequence_style_variant_passes(capsys):
    """``DTensor.from_local`` for the weights (each rank holds them whole) and an output hook
    that hands the ``Shard(1)`` DTensor on as it is: the same layouts, values and collectives."""
    passes(ex.check_sequence_style, seq_style(), capsys=capsys)


@pytest.mark.slow
def test_sequence_style_weights_left_to_distribute_module_passes(capsys):
    """Weights left plain tensors by the partition function: ``distribute_module`` replicates
    every parameter that is not yet a DTensor, so they are ``Replicate()`` DTensors all the
    same, and the program is right."""
    passes(ex.check_sequence_style, seq_style(params=None), capsys=capsys)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SEQ_WRONG))
def test_sequence_style_wrong_program_fails(name):
    cls, words = SEQ_WRONG[name]
    fails(ex.check_sequence_style, cls, words=words)


def test_sequence_bytes_follow_from_the_shapes():
    """13.7's bytes per rank, float32 (4 bytes): at H = 12, T = 12 on 2 processes an all-gather
    of this rank's 6 tokens (6 * 12 * 4), a reduce-scatter of the whole 12-token partial sum
    (12 * 12 * 4), each way, and 12 * 4 per norm gradient."""
    from tpviz.pytorch.builds import _seq_bytes

    step = [("all-gather", 288), ("reduce-scatter", 576)]
    assert _seq_bytes(12, 12, 2) == {"forward": step, "backward": step,
                                     "norm": [("all-reduce", 48), ("all-reduce", 48)]}


# --- 13.7, a second reviewer's programs (issue 39) ----------------------------------------------
class TorchHooks(ParallelStyle):  # torch's SequenceParallel's own hooks, named, not inherited
    def _apply(self, module, device_mesh):
        from functools import partial

        return distribute_module(
            module, device_mesh, None,
            partial(SequenceParallel._prepare_input_fn, (Shard(1),)),
            partial(SequenceParallel._prepare_output_fn, False))


def tokens_of(ranks):
    """An input hook that declares this rank's [1, T/N, H] slice of ``[1, T, H]``, the global
    shape written out, N from ``ranks`` (a number: hard-coded; None: the mesh's size)."""
    def tokens(layer, inputs, mesh):
        b, t, h = inputs[0].shape
        n = ranks or mesh.size()
        return DTensor.from_local(inputs[0], mesh, [Shard(1)], run_check=False,
                                  shape=torch.Size([b, t * n, h]), stride=(t * n * h, h, 1))
    return tokens


class FourRanks(ParallelStyle):  # the sequence's length written as 4 slices
    def _apply(self, module, device_mesh):
        return distribute_module(module, device_mesh, None, tokens_of(4))


class AnyRanks(ParallelStyle):  # right: the length from the mesh, the output rebuilt as it was
    def _apply(self, module, device_mesh):
        def same(layer, y, mesh):
            return DTensor.from_local(y.to_local(), mesh, y.placements, run_check=False)

        return distribute_module(module, device_mesh, None, tokens_of(None), same)


class LocalNorm(ParallelStyle):  # no distribute_module: the weights stay plain, local tensors
    def _apply(self, module, device_mesh):
        module.register_forward_pre_hook(
            lambda m, inp: tuple(i.to_local() if isinstance(i, DTensor) else i for i in inp))
        module.register_forward_hook(
            lambda m, inp, y: DTensor.from_local(y, device_mesh, [Shard(1)], run_check=False))
        return module


SEQ_WRONG_REVIEW = {
    "torch's SequenceParallel hooks handed to distribute_module": (TorchHooks, CALLS_TORCH),
    "the sequence written as 4 slices": (
        FourRanks, r"right on 4 processes .*, but on 2 processes the plan fails: .*shape"),
    "the norm on local tensors, its weights never DTensors": (
        LocalNorm, r"gradient of 0\.weight differs .*the parts are never added"),
    "the features taken as split (Shard(2))": (
        seq_style(inp=Shard(2)), r"plan fails: .*normalized_shape=\[8\]"),
    "the tokens taken as the batch (Shard(0))": (
        seq_style(inp=Shard(0)), r"has shape \(4, 2, 8\); one process's is \(1, 8, 8\)"),
    "the output handed on split on the batch": (
        seq_style(give=([Shard(0)],)), r'hands layer "1" a DTensor placed \(Shard\(dim=0\),\)'),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SEQ_WRONG_REVIEW))
def test_sequence_style_review_wrong_program_fails(name):
    cls, words = SEQ_WRONG_REVIEW[name]
    fails(ex.check_sequence_style, cls, words=words)


@pytest.mark.slow
def test_sequence_style_global_shape_from_the_mesh_passes(capsys):
    """The input's global shape written out, its length T/N * N with N the mesh's size, and the
    output rebuilt from its local part with the same placement: right on every mesh."""
    passes(ex.check_sequence_style, AnyRanks, capsys=capsys)


class StubSequence(ParallelStyle):  # the release's stub of 13.7 (grading.student)
    def _apply(self, module, device_mesh):
        # TODO: your code here
        raise NotImplementedError("exercise not attempted yet")


@pytest.mark.slow
def test_sequence_style_release_stub_is_not_attempted(capsys):
    """The learner's notebook as released: ``SequenceStyle`` with the stub's ``_apply`` is not
    attempted, not wrong (its ``NotImplementedError`` is raised in the workers)."""
    stub(ex.check_sequence_style, StubSequence, capsys=capsys)
