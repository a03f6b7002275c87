"""The pipeline chapter's checkers on the harness: the 1F1B order (7.1) and the exact split (7.4)
with the library's answers out of reach; one tick's sends (7.6) on 4 and 8 devices; a schedule
for a stash of 2 (7.7) built for several (p, m). The book's solutions pass; wrong programs
written as a learner would fail with a message that names the mistake."""

import itertools

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes

import tpviz
from tpviz import pipeline
from tpviz.core import exercises as framework
from tpviz.pipeline import spmd
from tpviz.pipeline.builds import as_schedule, stash_target

ex = tpviz.exercises


# --- 7.1 and 7.4: the library's own answers are out of reach ---------------------------------

def test_one_f_one_b_refuses_the_library_schedule():
    def library(p, m, d):
        return [(op.kind, op.microbatch) for op in pipeline.schedule("1f1b", p, m).ops[d]]

    fails(ex.check_one_f_one_b, library, words=r"write what `tpviz\.pipeline\.plan\.schedule`")


def test_balance_refuses_the_library_split(capsys):
    def library(costs, p):
        return [b - a for a, b in pipeline.balance(costs, p).bounds]

    fails(ex.check_balance, library, words=r"write what `tpviz\.pipeline\.plan\.balance`")


# --- 7.6 one tick's sends --------------------------------------------------------------------

def _tick(y, dh, forward, backward):  # the book's solution
    return (jax.lax.ppermute(y, "stage", [(i, i + 1) for i in forward]),
            jax.lax.ppermute(dh, "stage", [(i, i - 1) for i in backward]))


def _masked(received, devices):
    d = jax.lax.axis_index("stage")
    return jnp.where(jnp.isin(d, jnp.array(devices)), received, 0.0)


def _every_link(y, dh, forward, backward):  # sends on all links, the receivers keep theirs
    n = jax.lax.axis_size("stage")
    f = jax.lax.ppermute(y, "stage", [(i, i + 1) for i in range(n - 1)])
    b = jax.lax.ppermute(dh, "stage", [(i + 1, i) for i in range(n - 1)])
    return _masked(f, [i + 1 for i in forward]), _masked(b, [i - 1 for i in backward])


def _ring(y, dh, forward, backward):  # forward as a ring: the last device sends to the first
    n = jax.lax.axis_size("stage")
    f = jax.lax.ppermute(y, "stage", [(i, (i + 1) % n) for i in range(n)])
    return _masked(f, [i + 1 for i in forward]), _tick(y, dh, forward, backward)[1]


def _gathered(y, dh, forward, backward):  # every block to every device, then pick
    d = jax.lax.axis_index("stage")
    every = jax.lax.all_gather(y, "stage")
    return (_masked(every[jnp.maximum(d - 1, 0)], [i + 1 for i in forward]),
            _tick(y, dh, forward, backward)[1])


def _four_devices(y, dh, forward, backward):  # the links of a 4-device pipeline written out
    return (jax.lax.ppermute(y, "stage", [(i, i + 1) for i in range(3) if i in forward]),
            jax.lax.ppermute(dh, "stage", [(i, i - 1) for i in range(1, 4) if i in backward]))


def _library(y, dh, forward, backward):  # the library's helper for a tick's pairs
    t = spmd.Ticks(((spmd.FWD,),), ((0,),), ((0,),), 1)
    t.sends(0, +1)
    return _tick(y, dh, forward, backward)


TICK_WRONG = {
    "library": (_library, r"write what `tpviz\.pipeline\.spmd\.Ticks\.sends`"),
    "every link": (_every_link, "transfers where this tick has .* send although"),
    "ring": (_ring, r"a send \(3, 0\) between devices that are not neighbours"),
    "gathered": (_gathered, "all-gather is not a send between neighbours"),
    "four devices": (_four_devices, "right on 4 devices .* but on 8 devices"),
    "swapped": (lambda y, dh, f, b: (jax.lax.ppermute(y, "stage", [(i, i - 1) for i in f if i]),
                                     jax.lax.ppermute(dh, "stage", [(i, i + 1) for i in b])),
                "wrong values|raised"),
    "one permute each way, doubled": (
        lambda y, dh, f, b: _tick(jnp.concatenate([y, y]), jnp.concatenate([dh, dh]), f, b),
        "block of shape"),
}


def test_tick_solution_passes_and_reports_the_sends(capsys):
    passes(ex.check_tick, _tick, capsys=capsys)


def test_tick_one_permute_per_pair_passes(capsys):
    def per_pair(y, dh, forward, backward):  # the same transfers, one permute each
        got_y, got_dh = jnp.zeros_like(y), jnp.zeros_like(dh)
        for i in forward:
            got_y = got_y + jax.lax.ppermute(y, "stage", [(i, i + 1)])
        for i in backward:
            got_dh = got_dh + jax.lax.ppermute(dh, "stage", [(i, i - 1)])
        return got_y, got_dh

    passes(ex.check_tick, per_pair, capsys=capsys)


@pytest.mark.parametrize("name", sorted(TICK_WRONG))
def test_tick_rejects_wrong_programs(name):
    wrong, words = TICK_WRONG[name]
    fails(ex.check_tick, wrong, words=words)


# --- 7.7 a schedule for a stash of 2 ---------------------------------------------------------

def small_stash(p, m):  # the book's solution: a ready backward first, a forward when a slot is free
    done, ops, held, next_f = {}, [[] for _ in range(p)], [[] for _ in range(p)], [0] * p
    tick = 0
    while any(len(o) < 2 * m for o in ops):
        ran = []
        for d in range(p):
            backs = [i for i in held[d]
                     if done.get(("B", i, d + 1) if d < p - 1 else ("F", i, d), tick) < tick]
            i = next_f[d]
            if backs:
                ran.append((d, "B", min(backs)))
            elif i < m and len(held[d]) < 2 and (d == 0 or done.get(("F", i, d - 1), tick) < tick):
                ran.append((d, "F", i))
        for d, kind, i in ran:
            ops[d].append((kind, i))
            done[kind, i, d] = tick
            if kind == "F":
                held[d].append(i)
                next_f[d] += 1
            else:
                held[d].remove(i)
        tick += 1
    return ops


def _naive(p, m):  # one microbatch at a time: F, B, F, B on every device
    return [[(k, i) for i in range(m) for k in "FB"] for _ in range(p)]


def _same_list(p, m):  # every device F0 F1 B0 F2 B1 ...: 2 slots, but the last device waits
    ops = [("F", 0), ("F", 1)]
    for i in range(m - 2):
        ops += [("B", i), ("F", i + 2)]
    return [[*ops, ("B", m - 2), ("B", m - 1)] for _ in range(p)]


def _capped_1f1b(p, m):  # 1F1B with its warm-up cut to one forward: 2 slots, slow
    out = []
    for d in range(p):
        w = min(1, p - d - 1)
        seq = [("F", i) for i in range(w)]
        for i in range(m - w):
            seq += [("F", w + i), ("B", i)]
        out.append(seq + [("B", i) for i in range(m - w, m)])
    return out


WRITTEN_OUT = small_stash(4, 8)  # the lists for p = 4, m = 8, pasted in


def _crossed(p, m):  # device 0 takes B1 before B0: it waits for a gradient that waits for it
    lists = small_stash(p, m)
    first = [k for k, (kind, _) in enumerate(lists[0]) if kind == "B"][:2]
    lists[0][first[0]], lists[0][first[1]] = lists[0][first[1]], lists[0][first[0]]
    return lists


STASH_WRONG = {
    "library 1F1B": (lambda p, m: [[(o.kind, o.microbatch) for o in ops]
                                   for ops in pipeline.schedule("1f1b", p, m).ops],
                     r"write what `tpviz\.pipeline\.plan\.schedule`"),
    "written out for p = 4": (lambda p, m: WRITTEN_OUT, "right for p = 4, m = 8 .* but for p = 3"),
    "naive": (_naive, "the naive schedule .*: it takes 64 ticks"),
    "same list everywhere": (_same_list, "takes 58 ticks"),
    "capped 1F1B": (_capped_1f1b, "takes 46 ticks"),
    "GPipe": (lambda p, m: [[("F", i) for i in range(m)] + [("B", i) for i in range(m)]
                            for _ in range(p)], "holds 8 microbatches"),
    "four devices": (lambda p, m: small_stash(4, m), "4 device lists for p = 3"),
    "crossed": (_crossed, "cannot run it in lock step: device 0.s B of microbatch 0"),
    "a microbatch forgotten": (lambda p, m: [o[:-1] for o in small_stash(p, m)],
                               "runs microbatch 7 as"),
    "backward first": (lambda p, m: [o[::-1] for o in small_stash(p, m)], "before its F"),
}


def test_small_stash_targets_are_the_papers_arithmetic():
    for p, m in ((4, 8), (3, 6), (5, 7), (2, 5)):
        ticks = spmd.ticks(as_schedule(small_stash(p, m), p, m)).count
        # no 2-slot schedule beats p·m + 1; one microbatch at a time takes 2pm
        assert p * m + 1 <= ticks <= stash_target(p, m) < 2 * p * m
        assert spmd.ticks(as_schedule(_naive(p, m), p, m)).count == 2 * p * m


def test_small_stash_solution_passes_and_reports_the_program(capsys):
    ex.check_small_stash(small_stash)
    out = capsys.readouterr().out
    assert "✓" in out and "48 transfers" in out and "a stash of 2 slots" in out
    assert "34 ticks against 1F1B's 22" in out


@pytest.mark.parametrize("name", sorted(STASH_WRONG))
def test_small_stash_rejects_wrong_schedules(name):
    wrong, words = STASH_WRONG[name]
    fails(ex.check_small_stash, wrong, words=words)


def test_small_stash_stub_and_endless_loop(capsys, monkeypatch):
    def stub(p, m):
        raise NotImplementedError

    ex.check_small_stash(stub)
    assert "not attempted" in capsys.readouterr().out
    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def endless(p, m):
        while True:
            pass

    fails(ex.check_small_stash, endless, words="was stopped")


def test_every_stash_case_is_a_different_size():
    from tpviz.pipeline.builds import STASH_CASES, STASH_RUNS

    assert len(set(STASH_CASES)) == len(STASH_CASES) >= 2
    assert len({p for p, _ in STASH_RUNS}) >= 2 and set(STASH_RUNS) <= set(STASH_CASES)
    assert all(m >= 2 for _, m in itertools.chain(STASH_CASES))


def test_every_unavailable_name_resolves():
    """The names the chapters' checkers keep out of reach still name the library's functions
    (a refactor that moves one must move the name too)."""
    import importlib

    from tpviz.core.unavailable import codes, resolve

    names = set()
    for module in ("pipeline.builds", "pipeline.exercises", "asyncpipe.builds", "moe.builds",
                   "moe.exercises", "together.builds", "together.builds_zero", "autoshard.builds",
                   "context.builds", "context.exercises"):
        m = importlib.import_module(f"tpviz.{module}")
        for value in vars(m).values():
            if isinstance(value, tuple) and value and all(
                    isinstance(v, str) and v.startswith("tpviz.") for v in value):
                names |= set(value)
            if hasattr(value, "unavailable") and isinstance(value.unavailable, tuple):
                names |= set(value.unavailable)
    assert len(names) > 30
    for name in sorted(names):
        assert codes(resolve(name)), name
