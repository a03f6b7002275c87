"""Each checker: the right answer passes, plausible wrong answers fail with a specific message,
the stub reports "not attempted yet", and wrong learner code never escapes as a raw traceback."""

import itertools
import json
import pathlib
import re

import jax
import numpy as np
import pytest
from checking import fails, passes
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz.core.exercises import PENDING, Wrong, expect_array, shown
from tpviz.exercises import checker

ex = tpviz.exercises




def test_bytes_per_device(capsys):
    passes(ex.check_bytes_per_device, 2048 * 2048 * 2, capsys=capsys)  # [2048, 2048] bf16 block
    fails(ex.check_bytes_per_device, 2048 * 2048, words="elements per device, not bytes")
    fails(ex.check_bytes_per_device, 4096 * 8192 * 2, words="whole array")
    fails(ex.check_bytes_per_device, 2048 * 2048 * 4, words="4 bytes per element")
    fails(ex.check_bytes_per_device, 1024 * 1024 * 2, words="not right")
    fails(ex.check_bytes_per_device, "lots", words="should be a number")


def test_whole_numbers_read_without_a_decimal_point():
    """4096 / 2 * 8192 / 4 is the float 4194304.0: the message says 4,194,304 (not .0)."""
    said = fails(ex.check_bytes_per_device, 4096 / 2 * 8192 / 4, words="elements per device")
    assert "4,194,304 is the number" in said
    said = fails(ex.check_bytes_per_device, np.float32(1024 * 1024 * 2), words="not right")
    assert "2,097,152, which is not right" in said
    assert [shown(x) for x in (3.0, 1234567.0, 0.125, 1234567.5, 2.5e-7)] == [
        "3", "1,234,567", "0.125", "1,234,567.50", "2.5e-07"]


def test_every_mark_a_check_prints_is_in_a_plain_text_font():
    """✓, ✗ and the not-attempted mark render without an emoji font (⏳ did not: an empty box).
    DejaVu Sans, which matplotlib ships and most Linux desktops use, must have each."""
    from matplotlib import font_manager, ft2font

    font = font_manager.findfont("DejaVu Sans", fallback_to_default=False)
    glyphs = ft2font.FT2Font(font).get_charmap()
    marks = PENDING + "✓✗⚠"
    assert all(ord(c) in glyphs for c in marks), [c for c in marks if ord(c) not in glyphs]
    assert 0x23F3 not in glyphs  # (the check would have caught ⏳)


def test_holders(capsys):
    passes(ex.check_holders, {0, 1, 2, 3}, capsys=capsys)
    fails(ex.check_holders, {0, 4}, words="row-major")
    fails(ex.check_holders, {0}, words="not all of its holders")
    fails(ex.check_holders, {4, 5, 6, 7}, words="not the set")
    fails(ex.check_holders, 3, words="set of device numbers")


@pytest.fixture(scope="module")
def mesh():
    return tpviz.make_mesh((2, 4), ("X", "Y"))


def test_rows_over_mesh(mesh, capsys):
    y = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    passes(ex.check_rows_over_mesh, jax.device_put(y, NamedSharding(mesh, P(("X", "Y")))), y,
           capsys=capsys)
    fails(ex.check_rows_over_mesh, jax.device_put(y, NamedSharding(mesh, P("X", "Y"))), y,
          words=r"block of shape \(8, 2\)")
    fails(ex.check_rows_over_mesh, jax.device_put(y, NamedSharding(mesh, P(("Y", "X")))), y,
          words="wrong devices")
    fails(ex.check_rows_over_mesh, y, y, words="NamedSharding")
    fails(ex.check_rows_over_mesh, jax.device_put(y * 2, NamedSharding(mesh, P(("X", "Y")))), y,
          words="wrong values")


def test_total(capsys):
    mesh8 = tpviz.make_mesh((8,), ("X",))
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)

    def shard(body):
        return jax.shard_map(body, mesh=mesh8, in_specs=P("X"), out_specs=P())

    passes(ex.check_total, shard(lambda b: jax.lax.psum(b.sum(), "X")), x, capsys=capsys)
    # all-reduces the whole block, then sums: right value, 16x the bytes
    fails(ex.check_total, shard(lambda b: jax.lax.psum(b, "X").sum()), x, words="one number")
    # forgets the psum: shard_map refuses the unreplicated output; reported, not a traceback
    fails(ex.check_total, shard(lambda b: b.sum()), x, words="total\\(x\\) raised")
    # the mean instead of the sum
    fails(ex.check_total, shard(lambda b: jax.lax.pmean(b.sum(), "X")), x, words="wrong values")


def test_stubs_report_not_attempted(capsys):
    def stub(*_):
        raise NotImplementedError("exercise not attempted yet")

    for check, args in [(ex.check_bytes_per_device, (...,)), (ex.check_holders, (...,)),
                        (ex.check_rows_over_mesh, (..., np.zeros(2))), (ex.check_total, (stub, 1))]:
        assert check(*args) is None
        assert capsys.readouterr().out.startswith(f"{PENDING} ")


def test_framework_reports_shape_dtype_nan_and_unexpected_errors():
    @checker("demo")
    def check_double(fn):
        expect_array(fn(np.ones(3, np.float32)), np.full(3, 2, np.float32), what="fn(x)")

    fails(check_double, lambda x: x, words="wrong values")
    fails(check_double, lambda x: np.ones(4, np.float32), words=r"shape \(4,\)")
    fails(check_double, lambda x: (2 * x).astype(np.float64), words="dtype float64")
    fails(check_double, lambda x: x * np.nan, words="NaN")
    fails(check_double, lambda x: 2, words="should be an array")
    fails(check_double, lambda x: 1 / 0, words="could not be checked.*ZeroDivisionError")

    @checker("hint")
    def check_hint(_):
        raise Wrong("no", "try again")

    assert "Hint: try again" in fails(check_hint, 1, words="✗ hint: no")


def test_matmul_checkers(capsys):
    mesh8 = tpviz.make_mesh((8,), ("X",))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 32), dtype=np.float32)
    w = rng.standard_normal((32, 64), dtype=np.float32)

    def sm(body, in_specs, out_specs):
        return jax.shard_map(body, mesh=mesh8, in_specs=in_specs, out_specs=out_specs)

    column = sm(lambda a, b: a @ b, (P(), P(None, "X")), P(None, "X"))
    passes(ex.check_column_parallel, column, x, w, capsys=capsys)
    # gathers W back and returns a replicated Y: right values, needless communication
    gathered = sm(lambda a, b: a @ tpviz.compat.all_gather_invariant(b, "X", axis=1, tiled=True),
                  (P(), P(None, "X")), P())
    fails(ex.check_column_parallel, gathered, x, w, words="the result is held whole")
    # splits X's columns instead of W's: a shape error inside the learner's code, reported plainly
    fails(ex.check_column_parallel, sm(lambda a, b: a @ b, (P(None, "X"), P(None, "X")),
                                       P(None, "X")), x, w, words="raised")

    def scatter(a, b):
        return jax.lax.psum_scatter(a @ b, "X", scatter_dimension=1, tiled=True)

    rs_specs = ((P(None, "X"), P("X", None)), P(None, "X"))
    passes(ex.check_reduce_scatter, sm(scatter, *rs_specs), x, w, capsys=capsys)
    # all-reduce, then keep this device's columns: right values, 4x the communication
    def reduce_then_slice(a, b):
        full = jax.lax.psum(a @ b, "X")
        i = jax.lax.axis_index("X")
        return jax.lax.dynamic_slice_in_dim(full, i * 8, 8, axis=1)

    fails(ex.check_reduce_scatter, sm(reduce_then_slice, *rs_specs), x, w,
          words="shape")  # 8 columns hard-coded: wrong at the check's own sizes
    # forgets to reduce: every device returns only its own partial sum
    fails(ex.check_reduce_scatter, sm(lambda a, b: (a @ b)[:, :8], *rs_specs), x, w,
          words="wrong values|shape")

    passes(ex.check_all_gather_bytes, 512 * 4096 * 2, capsys=capsys)
    fails(ex.check_all_gather_bytes, 512 * 1024 * 2, words="before the all-gather")
    fails(ex.check_all_gather_bytes, 1024 * 4096 * 2, words="whole of In")

    right = {"a": 1, "b": 2, "c": 3, "d": 4, "e": 2, "f": 2}
    passes(ex.check_cases, right, capsys=capsys)
    # no per-key feedback: one wrong key and two wrong keys read the same, naming no key
    one = fails(ex.check_cases, {**right, "b": 3}, words="not all of them are right")
    two = fails(ex.check_cases, {**right, "e": 4, "f": 4}, words="not all of them are right")
    assert one == two and "(b)" not in one
    fails(ex.check_cases, {**right, "e": 5}, words="one of the case numbers")
    fails(ex.check_cases, [1, 2, 3, 4], words="give a dict")


# --- pipeline chapter --------------------------------------------------------------------------

def _one_f_one_b(p, m, d):
    warm = min(p - d - 1, m)
    order = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", i) for i in range(m - warm, m)]


def test_one_f_one_b_order(capsys):
    passes(ex.check_one_f_one_b, _one_f_one_b, capsys=capsys)
    fails(ex.check_one_f_one_b, lambda p, m, d: [("F", i) for i in range(m)] + [("B", i) for i in range(m)],
          words="GPipe's order")
    fails(ex.check_one_f_one_b, lambda p, m, d: _one_f_one_b(p, m, min(d + 1, p - 1)),
          words="forwards before its first backward")  # the warm-up of the next device
    fails(ex.check_one_f_one_b,
          lambda p, m, d: [(k, m - 1 - i) if k == "B" else (k, i) for k, i in _one_f_one_b(p, m, d)],
          words="differs from 1F1B at position")  # backwards in the wrong order
    fails(ex.check_one_f_one_b, lambda p, m, d: "F0 F1", words="list of \\(kind, microbatch\\)")


def test_bubble_and_microbatches(capsys):
    passes(ex.check_bubble, 7 / 39, capsys=capsys)
    fails(ex.check_bubble, 7 / 32, words="relative to the ideal")
    fails(ex.check_bubble, 7 / 8, words="naive")
    fails(ex.check_bubble, 0.5, words="not right")
    # (p-1)/(m+p-1) <= 0.05 with p = 8  <=>  m >= 7 / 0.05 - 7 = 133
    passes(ex.check_microbatches, 133, capsys=capsys)
    fails(ex.check_microbatches, 140, words="relative to the ideal")
    fails(ex.check_microbatches, 200, words="fewer microbatches also do")
    fails(ex.check_microbatches, 132, words="not right")


def test_balance_checker(capsys):
    def exact(costs, p):  # brute force: try every set of cuts
        n = len(costs)
        best = min(itertools.combinations(range(1, n), p - 1),
                   key=lambda cuts: max(sum(costs[a:b]) for a, b in itertools.pairwise((0, *cuts, n))))
        return [b - a for a, b in itertools.pairwise((0, *best, n))]

    def greedy(costs, p):  # fill each stage up to the average: not optimal in general
        target, sizes, acc = sum(costs) / p, [0], 0
        for c in costs:
            if acc + c > target and sizes[-1] and len(sizes) < p:
                sizes.append(0)
                acc = 0
            sizes[-1] += 1
            acc += c
        return sizes + [0] * (p - len(sizes))

    passes(ex.check_balance, exact, capsys=capsys)
    fails(ex.check_balance, greedy, words="each at least 1|a split with")
    fails(ex.check_balance, lambda c, p: [len(c) // p] * p, words="summing to|a split with")
    fails(ex.check_balance, lambda c, p: 1 / 0, words="raised ZeroDivisionError")


def test_weight_versions(capsys):
    passes(ex.check_weight_versions, [6, 5, 4, 3, 2, 1], capsys=capsys)
    fails(ex.check_weight_versions, [2] * 6, words="2BW")
    fails(ex.check_weight_versions, [1, 2, 3, 4, 5, 6], words="reversed")
    fails(ex.check_weight_versions, [5, 4, 3, 2, 1, 0], words="one short")
    fails(ex.check_weight_versions, [4, 3, 2, 1], words="list of 6")  # the chapter's p = 4
    fails(ex.check_weight_versions, [6] * 6, words="not right")


# --- Megatron chapter ---------------------------------------------------------------------------

def _conjugates(f_backward_psum=True, g_forward_psum=True, g_backward_psum=False):
    @jax.custom_vjp
    def f(x):
        return x

    f.defvjp(lambda x: (x, None),
             lambda _, ct: (jax.lax.psum(ct, "model") if f_backward_psum else ct,))

    @jax.custom_vjp
    def g(x):
        return jax.lax.psum(x, "model") if g_forward_psum else x

    g.defvjp(lambda x: (g(x), None),
             lambda _, ct: (jax.lax.psum(ct, "model") if g_backward_psum else ct,))
    return f, g


def test_conjugates_checker(capsys):
    passes(ex.check_conjugates, *_conjugates(), capsys=capsys)
    fails(ex.check_conjugates, *_conjugates(f_backward_psum=False), words="gradient of In")
    fails(ex.check_conjugates, *_conjugates(g_backward_psum=True), words="4x too large")
    fails(ex.check_conjugates, *_conjugates(g_forward_psum=False), words="forward pass is wrong")
    fails(ex.check_conjugates, lambda x: x, lambda x: jax.lax.psum(x, "model"),
          words="4x too large|gradient of X")  # no custom_vjp: a bare psum


def test_all_reduces_and_weight_bytes(capsys):
    passes(ex.check_all_reduces, 96, capsys=capsys)
    fails(ex.check_all_reduces, 48, words="one direction")
    fails(ex.check_all_reduces, 24, words="one per layer")
    h = 12288
    passes(ex.check_weight_bytes, 12 * h * h * 2 // 8, capsys=capsys)
    fails(ex.check_weight_bytes, 12 * h * h * 2, words="whole block")
    fails(ex.check_weight_bytes, 8 * h * h * 2 // 8, words="MLP only")
    fails(ex.check_weight_bytes, 12 * h * h * 4 // 8, words="4 bytes")


# --- ZeRO chapter ---------------------------------------------------------------------------------

def test_zero_memory_and_fewest_devices(capsys):
    psi = 1.5e9
    passes(ex.check_zero_memory, (2 * psi + 14 * psi / 16) / 1e9, capsys=capsys)  # 4.3125 GB
    fails(ex.check_zero_memory, (4 * psi + 12 * psi / 16) / 1e9, words="stage 1")
    fails(ex.check_zero_memory, 16 * psi / 16 / 1e9, words="stage 3")
    fails(ex.check_zero_memory, 16 * psi / 1e9, words="stage 0|16Ψ")
    fails(ex.check_zero_memory, 3.0, words="not right")
    passes(ex.check_fewest_devices, 13, capsys=capsys)  # 26 + 182 / N <= 40
    fails(ex.check_fewest_devices, 6, words="stage 3")
    fails(ex.check_fewest_devices, 12, words="slightly more than 40 GB")
    fails(ex.check_fewest_devices, 16, words="fewer do too")


def test_grad_reduce_scatter(capsys):
    def padded(g):
        return jax.numpy.pad(g, (0, -g.shape[0] % jax.lax.axis_size("data")))

    passes(ex.check_grad_reduce_scatter, lambda g: jax.lax.psum_scatter(
        padded(g), "data", tiled=True) / jax.lax.axis_size("data"), capsys=capsys)
    fails(ex.check_grad_reduce_scatter, lambda g: jax.lax.psum(g, "data") / 8, words="block")
    fails(ex.check_grad_reduce_scatter, lambda g: jax.lax.psum_scatter(padded(g), "data",
                                                                       tiled=True),
          words="sum over the devices")
    fails(ex.check_grad_reduce_scatter, lambda g: g[:8], words="wrong values")


# B = 24, D = 16, F = 48 on data=2 x model=4 (not the chapter's table, which would give it away)
MESH2D_ANSWER = {"in_gathered": (P("data", None), (12, 16)),
                 "w1_gathered": (P(None, "model"), (16, 12)),
                 "tmp": (P("data", "model"), (12, 12)), "w2_gathered": (P("model", None), (12, 16)),
                 "out_partial": (P("data", None), (12, 16)), "out": (P("data", "model"), (12, 4))}
# the names of an earlier edition (x_gathered, h, y_partial, y) are still accepted
MESH2D_OLD = {"x_gathered": MESH2D_ANSWER["in_gathered"], "h": MESH2D_ANSWER["tmp"],
              "w1_gathered": MESH2D_ANSWER["w1_gathered"],
              "w2_gathered": MESH2D_ANSWER["w2_gathered"],
              "y_partial": MESH2D_ANSWER["out_partial"], "y": MESH2D_ANSWER["out"]}


def test_step_shardings(capsys):
    passes(ex.check_step_shardings, MESH2D_ANSWER, capsys=capsys)
    passes(ex.check_step_shardings, MESH2D_OLD, capsys=capsys)
    passes(ex.check_step_shardings, {**MESH2D_ANSWER, "in_gathered": (("data",), (12, 16))},
           capsys=capsys)  # a tuple for the spec, trailing None left out
    fails(ex.check_step_shardings, {**MESH2D_ANSWER, "tmp": (P("model", "data"), (12, 12))},
          words="swapped")
    fails(ex.check_step_shardings, {**MESH2D_ANSWER, "w1_gathered": (P("data", "model"), (8, 12))},
          words="sharding of w1_gathered")
    fails(ex.check_step_shardings, {**MESH2D_ANSWER, "out": (P("data", "model"), (12, 16))},
          words="per-device shape of out")
    fails(ex.check_step_shardings, {**MESH2D_OLD, "y": (P("data", "model"), (12, 16))},
          words="per-device shape of out")
    fails(ex.check_step_shardings, {"out": MESH2D_ANSWER["out"]}, words="missing: in_gathered")
    fails(ex.check_step_shardings, {**MESH2D_ANSWER, "tmp": "data, model"}, words="pair")
    ex.check_step_shardings({k: ... for k in MESH2D_ANSWER})
    assert "not attempted" in capsys.readouterr().out


# --- honest labels (issue 39), every chapter --------------------------------------------------

HEADING = re.compile(r"\*\*Exercise (\d+\.\d+) — [^*]*\((easy|medium|hard), "
                     r"(one-line|multi-step|build|design)\)\.\*\*")
LABELLED = sorted(pathlib.Path(__file__).parent.parent.joinpath("book").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", LABELLED, ids=lambda p: p.name)
def test_exercise_kinds_follow_the_rules(path):
    """Each heading says its level and kind; >= 2 builds, >= 1 design, at most a third
    one-line."""
    cells = json.loads(path.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    prompts = re.findall(r"\*\*Exercise \d+\.\d+ —", text)
    kinds = [m.group(3) for m in HEADING.finditer(text)]
    assert len(kinds) == len(prompts) >= 6, "a heading without '(level, kind)'"
    assert kinds.count("build") >= 2 and kinds.count("design") >= 1
    assert 3 * kinds.count("one-line") <= len(kinds)
