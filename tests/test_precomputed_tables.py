"""Issue 39, gap 5: checkers that once ran on fixed inputs only (2.6, 7.1, 7.4, 9.3, 10.3, 10.4)
now also draw a case at each check. A table of the library's results keyed by the fixed inputs,
made before the check (outside its watch) and looked up inside it, fails on the drawn case; the
book's own solution passes at every check."""

import itertools

import numpy as np
import pytest
from checking import book_solution, fails, passes

import tpviz
from tpviz import context, moe, pipeline
from tpviz.core import hardware as hw
from tpviz.machines import builds as machine_builds
from tpviz.pipeline import exercises as pipeline_exercises

ex = tpviz.exercises
AGAIN = range(3)  # each check draws anew: the book's solution passes several draws


def recorded(check, solution):
    """The arguments of every call ``check`` makes, answered by ``solution``."""
    calls = []

    def record(*args):
        calls.append(tuple(np.array(a, copy=True) if hasattr(a, "shape") else a for a in args))
        return solution(*args)

    check(record)
    return calls


def key(args) -> tuple:
    return tuple(a.tobytes() + str(a.shape).encode() if hasattr(a, "shape") else repr(a)
                 for a in args)


def table(calls, library):
    """The library's answers to ``calls``, made here, before the check that looks them up."""
    answers = {key(args): library(*args) for args in calls}
    return lambda *args: answers[key(args)]


# --- 7.1 the 1F1B order ------------------------------------------------------------------------

def _library_order(p, m, d):
    return [(op.kind, op.microbatch) for op in pipeline.schedule("1f1b", p, m).ops[d]]


def test_one_f_one_b_precomputed_library_table_fails():
    lookup = table(pipeline_exercises.ORDER_CASES, _library_order)
    fails(ex.check_one_f_one_b, lookup, words="raised KeyError")


def test_one_f_one_b_table_would_pass_without_the_drawn_case(monkeypatch):
    """The test above fails for the drawn case, not for a fault in the table."""
    lookup = table(pipeline_exercises.ORDER_CASES, _library_order)
    monkeypatch.setattr(pipeline_exercises, "_drawn_order", lambda rng: (4, 8, 0))
    ex.check_one_f_one_b(lookup)


@pytest.mark.parametrize("again", AGAIN)
def test_one_f_one_b_book_solution_passes(again, capsys):
    passes(ex.check_one_f_one_b, book_solution("07_pipeline.ipynb", "one_f_one_b"),
           capsys=capsys)


def test_drawn_order_is_never_a_fixed_case():
    rng = np.random.default_rng(0)
    drawn = [pipeline_exercises._drawn_order(rng) for _ in range(2000)]
    assert not set(drawn) & set(pipeline_exercises.ORDER_CASES)
    assert all(2 <= p <= 48 and 1 <= m <= 96 and 0 <= d < p for p, m, d in drawn)
    assert len(set(drawn)) > 1900  # 2,000 draws from about 110,000 cases: few repeats


# --- 7.4 the exact split -----------------------------------------------------------------------

def _library_split(costs, p):
    return [b - a for a, b in pipeline.balance(costs, p).bounds]


def test_balance_precomputed_library_table_fails():
    cases = [(tuple(c), p) for c, p in pipeline_exercises.BALANCE_CASES]
    answers = {case: _library_split(list(case[0]), case[1]) for case in cases}
    fails(ex.check_balance, lambda c, p: answers[(tuple(c), p)], words="raised KeyError")


@pytest.mark.parametrize("again", AGAIN)
def test_balance_book_solution_passes(again, capsys):
    passes(ex.check_balance, book_solution("07_pipeline.ipynb", "split"), capsys=capsys)


# --- 10.3 and 10.4: GShard's drop order and the aux loss ----------------------------------------

def test_keep_precomputed_library_table_fails():
    solution = book_solution("10_moe.ipynb", "keep")
    fixed = recorded(ex.check_keep, solution)[:-1]  # the last call is the drawn case
    assert len(fixed) == 5
    fails(ex.check_keep, table(fixed, moe.keep), words="raised KeyError")


def test_aux_loss_precomputed_library_table_fails():
    solution = book_solution("10_moe.ipynb", "aux_loss")
    fixed = recorded(ex.check_aux_loss, solution)[:-1]
    assert len(fixed) == 3
    fails(ex.check_aux_loss, table(fixed, moe.aux_loss), words="raised KeyError")


@pytest.mark.parametrize("again", AGAIN)
def test_keep_and_aux_loss_book_solutions_pass(again, capsys):
    passes(ex.check_keep, book_solution("10_moe.ipynb", "keep"), capsys=capsys)
    passes(ex.check_aux_loss, book_solution("10_moe.ipynb", "aux_loss"), capsys=capsys)


# --- 2.6 a collective priced on a torus ---------------------------------------------------------

def _library_price(kind, v, sizes, wraps, link, hop):
    from dataclasses import replace

    system = replace(hw.TPUS["TPU v5e"], link=link, hop_latency=hop)
    p = hw.TpuSlice(system, sizes, wraps).price(kind, v)
    return p.latency_s, p.bandwidth_s


def test_torus_price_precomputed_library_table_fails():
    fixed = [(kind, v, sizes, wraps, 4.5e10, 1e-6)
             for kind, v, sizes, wraps in itertools.islice(machine_builds._cases(), 200)]
    fails(ex.check_torus_price, table(fixed, _library_price), words="raised KeyError")


def test_torus_price_table_would_pass_without_the_drawn_tori(monkeypatch, capsys):
    fixed = [(kind, v, sizes, wraps, 4.5e10, 1e-6)
             for kind, v, sizes, wraps in itertools.islice(machine_builds._cases(), 200)]
    monkeypatch.setattr(machine_builds, "DRAWN", 0)
    passes(ex.check_torus_price, table(fixed, _library_price), capsys=capsys)


@pytest.mark.parametrize("again", AGAIN)
def test_torus_price_book_solution_passes(again, capsys):
    passes(ex.check_torus_price, book_solution("02_hardware.ipynb", "torus_price"),
           capsys=capsys)


# --- 9.3 the online-softmax combine -------------------------------------------------------------

@pytest.mark.slow
def test_online_combine_precomputed_library_table_fails():
    solution = book_solution("09_context_parallelism.ipynb", "combine")
    fixed = recorded(ex.check_online_combine, solution)[:-1]
    assert len(fixed) == 4
    lookup = table(fixed, lambda *a: tuple(np.asarray(t) for t in context.combine(*a)))
    fails(ex.check_online_combine, lookup, words="raised KeyError")


@pytest.mark.slow
def test_online_combine_book_solution_passes(capsys):
    for _ in AGAIN:
        passes(ex.check_online_combine,
               book_solution("09_context_parallelism.ipynb", "combine"), capsys=capsys)


# --- 8.3 Chimera's schedule --------------------------------------------------------------------

def test_chimera_table_of_the_old_draw_range_fails(monkeypatch, capsys):
    """A table of the library's Chimera orders for p = 4 … 16 (the draw range before) fails at
    a p the check now draws beyond it; the book's solution passes there."""
    from test_ex_asyncpipe import chimera

    from tpviz.asyncpipe import builds

    orders = {p: [[(op.kind, op.microbatch, op.stage) for op in ops]
                  for ops in pipeline.schedule("chimera", p, p).ops] for p in range(4, 17, 2)}
    assert all(p in builds.CHIMERA_DRAWN for p in (18, 30, 40))

    class Draws:
        def __init__(self, p):
            self.p = p

        def choice(self, values):
            return self.p if self.p in values else values[0]

    for p in (18, 30, 40):
        monkeypatch.setattr(builds.np.random, "default_rng", lambda p=p: Draws(p))
        fails(ex.check_chimera, lambda q: orders[q], words="raised KeyError")
    monkeypatch.setattr(builds.np.random, "default_rng", lambda: Draws(16))
    ex.check_chimera(lambda q: orders[q])  # the same table passes where it has the drawn p
    for _ in AGAIN:
        monkeypatch.undo()
        passes(ex.check_chimera, chimera, capsys=capsys)
