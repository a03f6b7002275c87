"""Chapter 8's build checkers: Chimera's order for p = 4, 6 and 8 (8.3) and one PipeDream-2BW
update of a pipelined model on the stage mesh (8.4). The book's solutions pass; wrong programs
written as a learner would fail with a message that names the mistake."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes

import tpviz
from tpviz import pipeline
from tpviz.pipeline import run

ex = tpviz.exercises


# --- 8.3 Chimera ------------------------------------------------------------------------------

def chimera(p):  # the book's solution: a ready B first (lowest stage), else the F furthest along
    half = p // 2
    todo = [[(k, i, d) for i in range(half) for k in "FB"]
            + [(k, i, p - 1 - d) for i in range(half, p) for k in "FB"] for d in range(p)]
    done, order, tick = {}, [[] for _ in range(p)], 0

    def needs(op):
        k, i, s = op
        if k == "F":
            return ("F", i, s - 1) if s else None
        return ("B", i, s + 1) if s < p - 1 else ("F", i, s)

    while any(todo):
        ran = []
        for d in range(p):
            ready = [o for o in todo[d] if needs(o) is None or done.get(needs(o), tick) < tick]
            if ready:
                ran.append((d, min(ready, key=lambda o: (o[0] != "B",
                                                         o[2] if o[0] == "B" else -o[2], o[1]))))
        for d, op in ran:
            todo[d].remove(op)
            order[d].append(op)
            done[op] = tick
        tick += 1
    return order


FOUR = chimera(4)  # the lists for p = 4, written out


def _gpipe_order(p):  # both pipelines' forwards, then all backwards: valid, a larger bubble
    half = p // 2
    return [[("F", i, d) for i in range(half)] + [("F", i, p - 1 - d) for i in range(half, p)]
            + [("B", i, d) for i in range(half)] + [("B", i, p - 1 - d) for i in range(half, p)]
            for d in range(p)]


def _one_direction(p):  # every microbatch down: one pipeline, not two
    return [[(k, i, d) for i in range(p) for k in "FB"] for d in range(p)]


def _forward_first(p):  # the F furthest along first, but forwards before ready backwards
    order = chimera(p)
    return [sorted(ops, key=lambda o: o[0] != "F") for ops in order]


CHIMERA_WRONG = {
    "library": (lambda p: [[(o.kind, o.microbatch, o.chunk) for o in ops]
                           for ops in pipeline.schedule("chimera", p, p).ops],
                r"write what `tpviz\.pipeline\.plan\.schedule`"),
    "written out for p = 4": (lambda p: FOUR, "right for p = 4, but for p = 6: return 6 lists"),
    "GPipe order": (_gpipe_order, "valid, but the bubble is"),
    "one direction": (_one_direction, "one pipeline, not two"),
    "reversed": (lambda p: [ops[::-1] for ops in chimera(p)], "B of microbatch .* before its F"),
    "forwards first": (_forward_first, "valid, but the bubble is"),
    "fixed half": (lambda p: chimera(4) if p == 4 else [[(k, i, d) for i in range(2) for k in "FB"]
                                                        for d in range(p)],
                   "right for p = 4, but for p = 6: device 0 runs only stage 0"),
}


def test_chimera_solution_passes_at_every_p(capsys):
    passes(ex.check_chimera, chimera, capsys=capsys)


@pytest.mark.parametrize("name", sorted(CHIMERA_WRONG))
def test_chimera_rejects_wrong_orders(name):
    wrong, words = CHIMERA_WRONG[name]
    fails(ex.check_chimera, wrong, words=words)


def test_chimera_refuses_the_library_with_the_watch_switched_off_for_a_moment():
    """As in chapters 0-6 (review, issue 39): the watch switched off around the library's
    schedule and put back is refused when it happens."""
    import sys

    def sneaky(p):
        watch = sys.getprofile()
        sys.setprofile(None)
        ops = pipeline.schedule("chimera", p, p).ops
        sys.setprofile(watch)
        return [[(o.kind, o.microbatch, o.chunk) for o in row] for row in ops]

    fails(ex.check_chimera, sneaky, words=r"switched off the checker's watch")


def test_chimera_deadlock_is_named():
    def crossed(p):  # device 0 runs its upward forward before the downward B it feeds
        order = chimera(p)
        order[0] = sorted(order[0], key=lambda o: (o[2] == 0 and o[0] == "B", o))
        return order

    fails(ex.check_chimera, crossed, words="deadlocks|before its F|bubble")


# --- 8.4 2BW on the stage mesh ----------------------------------------------------------------

def two_bw(w, w_prev, x, target, lr):  # the book's solution
    s, p = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
    right = [(i, i + 1) for i in range(p - 1)]
    left = [(i + 1, i) for i in range(p - 1)]
    wp = w_prev[0]
    h = x
    for _ in range(p - 1):
        h = jnp.where(s == 0, x, jax.lax.ppermute(jnp.tanh(h @ wp), "stage", right))
    y = jnp.tanh(h @ wp)
    top = (y - target) / x.shape[0]
    dy = top
    for _ in range(p - 1):
        dh = (dy * (1 - y * y)) @ wp.T
        dy = jnp.where(s == p - 1, top, jax.lax.ppermute(dh, "stage", left))
    return w - lr * (h.T @ (dy * (1 - y * y)))[None]


def _variant(weights="prev", start="w", steps=None, ring=False, gather=False, library=False):
    """The solution with one thing changed, as a learner would get it wrong."""
    def fn(w, w_prev, x, target, lr):
        if library:  # the whole model on every device, by the library's loss
            ws = jax.lax.all_gather(w_prev[0], "stage")
            params = [(ws[k], jnp.zeros(ws.shape[-1])) for k in range(ws.shape[0])]
            g = jax.grad(run.loss_fn)(params, x, target)
            return w - lr * jnp.stack([gk[0] for gk in g])[jax.lax.axis_index("stage")][None]
        if gather:  # every stage's weights gathered: the whole model on every device
            ws = jax.lax.all_gather(w_prev[0], "stage")

            def loss(ws):
                h = x
                for k in range(ws.shape[0]):
                    h = jnp.tanh(h @ ws[k])
                return jnp.sum((h - target) ** 2) / (2 * x.shape[0])

            return w - lr * jax.grad(loss)(ws)[jax.lax.axis_index("stage")][None]
        s, p = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
        n = p if steps is None else steps
        right = [(i, (i + 1) % p) for i in range(p)] if ring else [(i, i + 1) for i in range(p - 1)]
        left = [((i + 1) % p, i) for i in range(p)] if ring else [(i + 1, i) for i in range(p - 1)]
        wp = w_prev[0] if weights == "prev" else w[0]
        h = x
        for _ in range(n - 1):
            h = jnp.where(s == 0, x, jax.lax.ppermute(jnp.tanh(h @ wp), "stage", right))
        y = jnp.tanh(h @ wp)
        top = (y - target) / x.shape[0]
        dy = top
        for _ in range(n - 1):
            dh = (dy * (1 - y * y)) @ wp.T
            dy = jnp.where(s == p - 1, top, jax.lax.ppermute(dh, "stage", left))
        base = w if start == "w" else w_prev
        return base - lr * (h.T @ (dy * (1 - y * y)))[None]

    return fn


TWO_BW_WRONG = {
    "library": (_variant(library=True), r"write what `tpviz\.pipeline\.run\.loss_fn`"),
    "plain SGD": (_variant(weights="w"), "plain SGD"),
    "from the previous version": (_variant(start="prev"), "starts from w_\\(t−1\\)"),
    "four stages": (_variant(steps=4), "right on 4 devices .* but on 2 devices"),
    "ring": (_variant(ring=True), r"a send \(0, 3\) between devices that are not neighbours"),
    "whole model everywhere": (_variant(gather=True), "all-gather .* does not need"),
    "no backward sends": (lambda w, wp, x, t, lr: _variant(steps=1)(w, wp, x, t, lr),
                          "wrong values"),
}


def test_two_bw_solution_passes_and_reports_the_sends(capsys):
    ex.check_two_bw(two_bw)
    out = capsys.readouterr().out  # n = 6, H = 8 float32: 192 bytes per send, 2 (p - 1) = 6
    assert "✓" in out and "6 collective-permutes along 'stage' of 192 bytes each" in out


@pytest.mark.parametrize("name", sorted(TWO_BW_WRONG))
def test_two_bw_rejects_wrong_programs(name):
    wrong, words = TWO_BW_WRONG[name]
    fails(ex.check_two_bw, wrong, words=words)


def test_the_old_four_line_loop_is_not_an_answer():
    def loop(w0, grad, lr, steps):  # the earlier exercise's answer: no mesh in it
        return [w0]

    fails(ex.check_two_bw, loop, words="raised|takes")
