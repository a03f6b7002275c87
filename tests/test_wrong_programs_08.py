"""Review of chapter 8's build checkers (issue 39's mutation pass): Chimera's order (8.3) and
2BW's update on the stage mesh (8.4). The right programs pass; wrong programs written as a learner
would (a library shortcut, a precomputed or one-size answer, the whole model on every device,
wrong or extra collectives) fail. Programs not repeated from tests/test_ex_asyncpipe.py."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes
from test_ex_asyncpipe import chimera

import tpviz
from tpviz.asyncpipe import builds
from tpviz.asyncpipe.builds import CHIMERA_DRAWN, CHIMERA_STAGES
from tpviz.pipeline import zoo

ex = tpviz.exercises


# --- 8.3 Chimera's order -----------------------------------------------------------------------

def _zoo(p):  # the library's zoo, as the chapter's figures call it
    return [[(o.kind, o.microbatch, o.chunk) for o in ops] for ops in zoo.build("chimera", p, p)]


def _same_stages(p):  # both halves on stage d of device d: two pipelines that run the same way
    return [[(k, i, d) for i in range(p) for k in "FB"] for d in range(p)]


def _one_after_other(p):  # the down pipeline's 1F1B, then the up pipeline's: valid, no overlap
    half, out = p // 2, []
    for d in range(p):
        down = [(k, i, d) for i in range(half) for k in "FB"]
        up = [(k, i, p - 1 - d) for i in range(half, p) for k in "FB"]
        out.append(down + up)
    return out


def _half_two(p):  # "half" fixed at the chapter's p = 4
    half = 2
    return [[(k, i, d) for i in range(half) for k in "FB"]
            + [(k, i, p - 1 - d) for i in range(half, p) for k in "FB"] for d in range(p)]


def _tupled_as_strings(p):  # the right order, with ops written as "F0@1" strings
    return [[f"{k}{i}@{s}" for k, i, s in ops] for ops in chimera(p)]


CHIMERA_WRONG = {
    "the library's zoo": (_zoo, r"write what `tpviz\.pipeline\.(zoo|plan)"),
    "both halves the same way": (_same_stages, "one pipeline, not two|should run F and B"),
    "one pipeline after the other": (_one_after_other, "valid, but the bubble is"),
    "half fixed at 2": (_half_two, "right for p = 4, but for p = 6|valid, but the bubble"),
    "ops as strings": (_tupled_as_strings, "triples"),
}


def test_chimera_right_program_passes(capsys):
    passes(ex.check_chimera, chimera, capsys=capsys)


@pytest.mark.parametrize("name", sorted(CHIMERA_WRONG))
def test_chimera_wrong_program_fails(name):
    wrong, words = CHIMERA_WRONG[name]
    fails(ex.check_chimera, wrong, words=words)


# a schedule is data: the library's orders for the p the checker asks, made before the check
# (outside its watch), then looked up
PRECOMPUTED = {p: _zoo(p) for p in CHIMERA_STAGES}


def test_chimera_precomputed_library_table_fails():
    """Fixed: the checker also asks one p drawn at each check."""
    fails(ex.check_chimera, lambda p: PRECOMPUTED[p], words=r"but for p = [1-4]\d: .*KeyError")


@pytest.mark.parametrize("p", CHIMERA_DRAWN)
def test_chimera_right_program_passes_at_every_drawn_p(p, capsys, monkeypatch):
    monkeypatch.setattr(builds, "CHIMERA_DRAWN", (p,))
    passes(ex.check_chimera, chimera, capsys=capsys)


# --- 8.4 2BW's update --------------------------------------------------------------------------

def two_bw(w, w_prev, x, target, lr):  # right: forward right by ppermute, backward left
    s, p = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
    wp = w_prev[0]
    h = x
    for _ in range(p - 1):
        h = jnp.where(s == 0, x, jax.lax.ppermute(jnp.tanh(h @ wp), "stage",
                                                  [(i, i + 1) for i in range(p - 1)]))
    y = jnp.tanh(h @ wp)
    top = (y - target) / x.shape[0]
    dy = top
    for _ in range(p - 1):
        dh = (dy * (1 - y * y)) @ wp.T
        dy = jnp.where(s == p - 1, top, jax.lax.ppermute(dh, "stage",
                                                         [(i + 1, i) for i in range(p - 1)]))
    return w - lr * (h.T @ (dy * (1 - y * y)))[None]


def _by_autodiff(w, w_prev, x, target, lr):  # right too: jax.grad through the forward's permutes
    s, p = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")

    def loss(wp):
        h = x
        for _ in range(p - 1):
            h = jnp.where(s == 0, x, jax.lax.ppermute(jnp.tanh(h @ wp), "stage",
                                                      [(i, i + 1) for i in range(p - 1)]))
        y = jnp.tanh(h @ wp)
        return jnp.where(s == p - 1, jnp.sum((y - target) ** 2) / (2 * x.shape[0]), 0.0)

    return w - lr * jax.grad(loss)(w_prev[0])[None]


def _broadcast_loss(w, w_prev, x, target, lr):  # the last stage's dy psum'd to every stage
    s, p = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
    out = two_bw(w, w_prev, x, target, lr)
    seen = jax.lax.psum(jnp.where(s == p - 1, 1.0, 0.0), "stage")
    return out * seen


def _psum_forward(w, w_prev, x, target, lr):  # the activations passed on by all-reduces
    s, p = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
    wp = w_prev[0]
    hs = [x]
    for k in range(p - 1):
        hs.append(jax.lax.psum(jnp.where(s == k, jnp.tanh(hs[-1] @ wp), 0.0), "stage"))
    h = sum(jnp.where(s == k, hk, 0.0) for k, hk in enumerate(hs))
    y = jnp.tanh(h @ wp)
    top = (y - target) / x.shape[0]
    dy = top
    for _ in range(p - 1):
        dh = (dy * (1 - y * y)) @ wp.T
        dy = jnp.where(s == p - 1, top, jax.lax.ppermute(dh, "stage",
                                                         [(i + 1, i) for i in range(p - 1)]))
    return w - lr * (h.T @ (dy * (1 - y * y)))[None]


def _weights_passed(w, w_prev, x, target, lr):  # the weights travel down the pipe, not h
    s, p = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
    ws, cur = [w_prev[0]], w_prev[0]
    for _ in range(p - 1):
        cur = jax.lax.ppermute(cur, "stage", [(i, (i + 1) % p) for i in range(p)])
        ws.append(cur)
    whole = jnp.stack([ws[(s - j) % p] for j in range(p)])  # stage j's weights

    def loss(stack):
        h = x
        for j in range(p):
            h = jnp.tanh(h @ stack[j])
        return jnp.sum((h - target) ** 2) / (2 * x.shape[0])

    g = jax.grad(loss)(whole)
    return w - lr * g[s][None]


def _lr_ignored(w, w_prev, x, target, lr):  # the chapter's learning rate written in
    return w - 0.1 * (w - two_bw(w, w_prev, x, target, 1.0))


def _library_backward(w, w_prev, x, target, lr):  # chapter 7's layer gradients for the backward
    from tpviz.pipeline import run

    s, p = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
    wp = w_prev[0]
    h = x
    for _ in range(p - 1):
        h = jnp.where(s == 0, x, jax.lax.ppermute(jnp.tanh(h @ wp), "stage",
                                                  [(i, i + 1) for i in range(p - 1)]))
    y = jnp.tanh(h @ wp)
    dz = (y - target) / x.shape[0] * (1 - y * y)
    gw = run.layer_backward_weights(h, dz)
    return w - lr * gw[0][None]


TWO_BW_WRONG = {
    "chapter 7's layer backward": (_library_backward,
                                   r"write what `tpviz\.pipeline\.run\.layer_backward_weights`"),
    "the last stage's flag all-reduced": (_broadcast_loss, "all-reduce"),
    "activations by all-reduce": (_psum_forward, "all-reduce"),
    "weights passed round the ring": (_weights_passed, "not neighbours|collective-permute|"
                                                       "wrong values|shape"),
}


def test_two_bw_right_program_passes(capsys):
    passes(ex.check_two_bw, two_bw, capsys=capsys)


def test_two_bw_by_autodiff_through_the_permutes_passes(capsys):
    passes(ex.check_two_bw, _by_autodiff, capsys=capsys)


@pytest.mark.parametrize("name", sorted(TWO_BW_WRONG))
def test_two_bw_wrong_program_fails(name):
    wrong, words = TWO_BW_WRONG[name]
    fails(ex.check_two_bw, wrong, words=words)


def test_two_bw_learning_rate_written_in():
    """Fixed: the checker passed lr = 0.1, the chapter's rate, in every case; now it varies."""
    fails(ex.check_two_bw, _lr_ignored, words="right on 4 devices .* lr = 0.1, but on 4 "
                                              "devices .* lr = 0.05: .*wrong values")
