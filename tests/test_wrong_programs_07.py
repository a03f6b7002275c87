"""Review of chapter 7's build checkers (issue 39's mutation pass): for 7.6 (one tick's sends) and
7.7 (a schedule in 2 stash slots), the right program passes and wrong programs written as a
learner would (a library shortcut, a one-size answer, the right values with the wrong sends,
extra collectives, a precomputed answer, an answer right on one device only) fail. Written by a
reviewer apart from tests/test_ex_pipeline.py, whose programs are not repeated here."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes

import tpviz
from tpviz.pipeline import zoo

ex = tpviz.exercises


# --- 7.6 one tick's sends ----------------------------------------------------------------------

def tick(y, dh, forward, backward):  # right: one permute each way with this tick's pairs
    return (jax.lax.ppermute(y, "stage", [(i, i + 1) for i in forward]),
            jax.lax.ppermute(dh, "stage", [(i, i - 1) for i in backward]))


def _psum_one_hot(y, dh, forward, backward):  # each send as an all-reduce of a one-hot block
    d = jax.lax.axis_index("stage")
    got_y, got_dh = jnp.zeros_like(y), jnp.zeros_like(dh)
    for i in forward:
        got_y = jnp.where(d == i + 1, jax.lax.psum(jnp.where(d == i, y, 0.0), "stage"), got_y)
    for i in backward:
        got_dh = jnp.where(d == i - 1, jax.lax.psum(jnp.where(d == i, dh, 0.0), "stage"), got_dh)
    return got_y, got_dh


def _all_to_all(y, dh, forward, backward):  # every device sends its block everywhere, keeps one
    n = jax.lax.axis_size("stage")
    d = jax.lax.axis_index("stage")
    every = jax.lax.all_to_all(jnp.broadcast_to(y, (n, *y.shape)), "stage", 0, 0)
    got = jnp.where(jnp.isin(d - 1, jnp.array(forward)), every[jnp.maximum(d - 1, 0)], 0.0)
    return got, tick(y, dh, forward, backward)[1]


def _keeps_own(y, dh, forward, backward):  # a device that receives nothing keeps its own block
    got_y, got_dh = tick(y, dh, forward, backward)
    d = jax.lax.axis_index("stage")
    fwd_to, bwd_to = jnp.array([i + 1 for i in forward]), jnp.array([i - 1 for i in backward])
    return (jnp.where(jnp.isin(d, fwd_to), got_y, y),
            jnp.where(jnp.isin(d, bwd_to), got_dh, dh))


def _hard_forward(y, dh, forward, backward):  # the chapter's first tick written in: 0→1, 1→2, 2→3
    return (jax.lax.ppermute(y, "stage", [(0, 1), (1, 2), (2, 3)]),
            jax.lax.ppermute(dh, "stage", [(i, i - 1) for i in backward]))


def _logged(y, dh, forward, backward):  # right sends, plus an all-reduce "to log the loss"
    got_y, got_dh = tick(y, dh, forward, backward)
    total = jax.lax.psum(jnp.sum(got_y), "stage")
    return got_y + 0.0 * total, got_dh


def _both_ways(y, dh, forward, backward):  # forward pairs and their reverse, "to be safe"
    pairs = [(i, i + 1) for i in forward]
    back = jax.lax.ppermute(y, "stage", [(b, a) for a, b in pairs])
    got_y = jax.lax.ppermute(y, "stage", pairs)
    return got_y + 0.0 * back, tick(y, dh, forward, backward)[1]


TICK_WRONG = {
    "an all-reduce per send": (_psum_one_hot, "all-reduce .* a kind of collective|not a send"),
    "all-to-all then pick": (_all_to_all, "all-to-all is not a send between neighbours"),
    "a device that receives nothing keeps its block": (_keeps_own, "wrong values"),
    "the chapter's first tick hard-coded": (_hard_forward, "wrong values|transfers where"),
    "an extra all-reduce for logging": (_logged, "all-reduce is not a send between neighbours"),
    "reverse sends thrown away": (_both_ways, "transfers where this tick has"),
}


def test_tick_right_program_passes(capsys):
    passes(ex.check_tick, tick, capsys=capsys)


@pytest.mark.parametrize("name", sorted(TICK_WRONG))
def test_tick_wrong_program_fails(name):
    wrong, words = TICK_WRONG[name]
    fails(ex.check_tick, wrong, words=words)


# --- 7.7 a schedule in 2 stash slots -----------------------------------------------------------

def small_stash(p, m):  # right: each device runs a ready B, else an F while a slot is free
    done, ops, held, next_f, tick_ = {}, [[] for _ in range(p)], [[] for _ in range(p)], [0] * p, 0
    while any(len(o) < 2 * m for o in ops):
        ran = []
        for d in range(p):
            need = ("B", d + 1) if d < p - 1 else ("F", d)
            backs = [i for i in held[d] if done.get((need[0], i, need[1]), tick_) < tick_]
            i = next_f[d]
            if backs:
                ran.append((d, "B", min(backs)))
            elif i < m and len(held[d]) < 2 and (d == 0 or done.get(("F", i, d - 1), tick_)
                                                   < tick_):
                ran.append((d, "F", i))
        for d, kind, i in ran:
            ops[d].append((kind, i))
            done[kind, i, d] = tick_
            if kind == "F":
                held[d].append(i)
                next_f[d] += 1
            else:
                held[d].remove(i)
        tick_ += 1
    return ops


def _zoo_1f1b(p, m):  # the library's zoo of schedules, under another name
    return [[(o.kind, o.microbatch) for o in ops] for ops in zoo.build("1f1b", p, m)]


def _one_f_one_b(p, m):  # 1F1B written by hand: p - d warm-up forwards hold p - d microbatches
    out = []
    for d in range(p):
        w = min(p - d - 1, m)
        seq = [("F", i) for i in range(w)]
        for i in range(m - w):
            seq += [("F", w + i), ("B", i)]
        out.append(seq + [("B", i) for i in range(m - w, m)])
    return out


def _two_in_flight_everywhere(p, m):  # F0 F1 then B, F alternating on every device: deadlocks
    ops = [("F", 0), ("F", 1)]
    for i in range(m - 2):
        ops += [("B", i), ("F", i + 2)]
    ops += [("B", m - 2), ("B", m - 1)]
    return [list(ops) for _ in range(p)]


def _pairs(p, m):  # GPipe two microbatches at a time: 2 slots, but the pairs never overlap
    ops = []
    for j in range(0, m, 2):
        group = range(j, min(j + 2, m))
        ops += [("F", i) for i in group] + [("B", i) for i in group]
    return [list(ops) for _ in range(p)]


TABLE = {(4, 8): small_stash(4, 8)}  # the notebook's size, computed once and pasted in


def _table(p, m):
    return TABLE.get((p, m)) or _one_f_one_b(p, m)


STASH_WRONG = {
    "the library's zoo": (_zoo_1f1b, r"write what `tpviz\.pipeline|runs microbatch 0 as|not a schedule of "
                                        r"chapter 8's zoo"),
    "1F1B by hand": (_one_f_one_b, "holds [3-5] microbatches"),
    "same 2-in-flight list on every device": (_two_in_flight_everywhere, "takes 58 ticks"),
    "the notebook's size pasted in": (_table, "right for p = 4, m = 8 .* but for p = 3"),
    "GPipe in pairs (F, F, B, B)": (_pairs, "ticks in lock step, more than the target"),
}


def test_small_stash_right_program_passes(capsys):
    passes(ex.check_small_stash, small_stash, capsys=capsys)


@pytest.mark.parametrize("name", sorted(STASH_WRONG))
def test_small_stash_wrong_program_fails(name):
    wrong, words = STASH_WRONG[name]
    fails(ex.check_small_stash, wrong, words=words)
