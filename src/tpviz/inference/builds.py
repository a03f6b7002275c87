"""The chapter's two build checkers, on :mod:`tpviz.core.harness`: a decode step's attention with
the cache split by key/value heads, and the cross-device log-sum-exp combine of a cache split
along the sequence. Each runs the learner's per-device function on meshes of its own sizes,
against one device, and reads the compiled program; the book's own versions
(:mod:`tpviz.inference.run`) are out of reach while the learner's code runs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import harness
from tpviz.core.exercises import checker
from tpviz.inference.mistakes import combine_mistake, decode_mistake
from tpviz.inference.model import attend

AXIS = "model"
ANSWERS = ("tpviz.inference.run._heads", "tpviz.inference.run._batch",
           "tpviz.inference.run._sequence", "tpviz.inference.run.step_body",
           "tpviz.inference.run.program", "tpviz.inference.run.combine_across",
           "tpviz.inference.model.decode_step")


# --- 14.5: a decode step's attention, the cache split by key/value heads ---------------------

def _decode_inputs(s: dict, rng: np.random.Generator) -> tuple:
    """x for each of T steps, the four projections, and caches holding ``start`` tokens."""
    b, h, d = s["B"], s["H"], s["d"]
    q, kv = s["heads"] * d, s["kv"] * d

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    cache = np.zeros((2, b, s["S"], s["kv"], d), np.float32)
    cache[:, :, :s["start"]] = rng.standard_normal((2, b, s["start"], s["kv"], d))
    return (rng.standard_normal((s["T"], b, h), dtype=np.float32), w(h, q), w(h, kv), w(h, kv),
            w(q, h), cache[0], cache[1])


def _decode_reference(start: int):
    """One device: T steps, each writing its keys and values at start + t, attending, and
    feeding its output into the next step's input (so the steps depend on each other)."""
    def reference(xs, wq, wk, wv, wo, k, v):
        b, d, k, v = xs.shape[1], k.shape[-1], jnp.asarray(k), jnp.asarray(v)
        outs, out = [], jnp.zeros(xs.shape[1:], jnp.float32)
        for t in range(xs.shape[0]):
            x, pos = xs[t] + out, start + t
            k = k.at[:, pos].set((x @ wk).reshape(b, -1, d))
            v = v.at[:, pos].set((x @ wv).reshape(b, -1, d))
            o, _ = attend((x @ wq).reshape(b, -1, d), k, v, jnp.arange(k.shape[1]) <= pos)
            out = o.reshape(b, -1) @ wo
            outs.append(out)
        return jnp.stack(outs), k, v
    return reference


def _decode_program(answer, case):
    """The learner's step inside ``shard_map`` (check_vma off: a missing all-reduce shows as
    wrong values), called T times with each output fed into the next input."""
    start = case.sizes["start"]
    split = P(None, None, AXIS)
    def checked(x, wq, wk, wv, wo, k, v, pos):  # one device's step, its blocks' shapes kept
        out, k2, v2 = answer(x, wq, wk, wv, wo, k, v, pos)
        for name, got, had in (("k_cache", k2, k), ("v_cache", v2, v)):
            if tuple(getattr(got, "shape", ())) != tuple(had.shape):
                raise ValueError(f"it returned a {name} block of shape "
                                 f"{tuple(getattr(got, 'shape', ()))}, but this device holds "
                                 f"{tuple(had.shape)}: return its own heads' cache, updated")
        return out, k2, v2

    step = jax.shard_map(checked, mesh=case.mesh, check_vma=False,
                         in_specs=(P(), P(None, AXIS), P(None, AXIS), P(None, AXIS),
                                   P(AXIS, None), split, split, P()),
                         out_specs=(P(), split, split))

    def program(xs, wq, wk, wv, wo, k, v):
        outs, out = [], jnp.zeros(xs.shape[1:], jnp.float32)
        for t in range(xs.shape[0]):
            out, k, v = step(xs[t] + out, wq, wk, wv, wo, k, v, jnp.int32(start + t))
            outs.append(out)
        return jnp.stack(outs), k, v
    return jax.jit(program)


def _sizes(B, H, heads, kv, d, S, start, T=3):
    return {"B": B, "H": H, "heads": heads, "kv": kv, "d": d, "S": S, "start": start, "T": T}


HEADS = harness.Build(
    what="your heads_attention",
    layouts=("Xs[T, B, H]", "Wq[H, J_{model}]", "Wk[H, J_{model}]", "Wv[H, J_{model}]",
             "Wo[J_{model}, H]", "Kc[B, S, M_{model}, D]", "Vc[B, S, M_{model}, D]"),
    out=("Out[T, B, H]", "Kc[B, S, M_{model}, D]", "Vc[B, S, M_{model}, D]"),
    axes=(AXIS,),
    cases=(((2,), _sizes(3, 48, 8, 4, 8, 16, 5)), ((4,), _sizes(3, 48, 8, 4, 8, 16, 5)),
           ((4,), _sizes(2, 40, 16, 4, 4, 12, 7))),
    inputs=_decode_inputs,
    reference=lambda *args: _decode_reference(_start(args[5]))(*args),
    program=_decode_program,
    collectives=lambda case: [harness.Expect(
        "all-reduce", case.sizes["B"] * case.sizes["H"] * 4, (AXIS,), count=case.sizes["T"],
        what="the [B, H] partial sums of W_O")],
    unavailable=ANSWERS,
    out_names=("the steps' output", "the keys' cache", "the values' cache"),
    diagnose=decode_mistake,
    hint="Each device computes its own heads' queries, keys and values, writes its keys and "
         "values at pos, attends over its own cache, and multiplies by its rows of W_O: a "
         "partial sum of the output. Which collective adds the partial sums?",
    praise="Megatron's attention, decoding: the cache never moves.")


def _start(k_cache) -> int:
    """The tokens a case's cache holds (the reference is called with the arrays only)."""
    return int((np.abs(np.asarray(k_cache)).sum(axis=(0, 2, 3)) > 0).sum())


@checker("A decode step with its cache split by heads")
def check_heads_decode(fn) -> str:
    """``fn(x, wq, wk, wv, wo, k_cache, v_cache, pos) -> (out, k_cache, v_cache)`` per device
    (see the chapter); 3 steps on 2 and 4 devices at two sets of sizes."""
    return harness.grade(fn, HEADS)


# --- 14.6: the cross-device combine of a cache split along the sequence ------------------

def _combine_inputs(s: dict, rng: np.random.Generator) -> tuple:
    """Queries, a cache, and each sequence's length: the first sequence fills the cache, the
    others end early (whole parts masked). Every score of a query is shifted by the same
    SHIFT = 200 (each key has one unit along a direction u of its key/value head, the query
    200·√d_h, and nothing else along u): e^lse overflows float32 unless the largest lse_i is
    subtracted first, while the devices' lse_i stay within a few units of each other, so that
    every part's weight counts."""
    b, n, m, d, length = s["B"], s["heads"], s["kv"], s["d"], s["S"]
    u = rng.standard_normal((b, m, d))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)  # [B, n_kv, d_h], unit

    def across(a, unit):  # a with no component along its unit vector
        return a - (a * unit).sum(-1, keepdims=True) * unit

    k = across(rng.standard_normal((b, length, m, d)), u[:, None]) + u[:, None]
    mine = np.repeat(u, n // m, axis=1)  # [B, n_h, d_h]: each query head's u
    q = across(rng.standard_normal((b, n, d)), mine) + 200 * np.sqrt(d) * mine
    v = rng.standard_normal((b, length, m, d))
    ends = np.r_[length, rng.integers(1, length // 2, b - 1)]
    valid = np.arange(length)[None, :] < ends[:, None]
    return q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), valid


def _combine_program(answer, case):
    def local(q, k, v, valid):  # q[B, n_h, d_h], k, v[B, S/N, n_kv, d_h], valid[B, S/N]
        o, lse = attend(q, k, v, valid)  # this device's part of the context
        return answer(o, lse)

    return jax.jit(jax.shard_map(local, mesh=case.mesh, check_vma=False,
                                 in_specs=(P(), P(None, AXIS), P(None, AXIS), P(None, AXIS)),
                                 out_specs=P()))


def _combine_sizes(B, heads, kv, d, S):
    return {"B": B, "heads": heads, "kv": kv, "d": d, "S": S}


def _combine_bytes(case, found) -> str | None:
    """Only all-reduces, of exactly a max of lse [B, n_h] and the sums of w·o [B, n_h, d_h] and
    w [B, n_h]: bytes that do not grow with the devices (checked on every case)."""
    if {c.kind for c, _ in found} - {"all-reduce"}:
        return ("each device then receives every other device's part, N times the bytes of "
                "one; all-reduces (max and sums) need a constant number of bytes")
    s = case.sizes
    total = sum(c.full_bytes for c, _ in found)
    need = s["B"] * s["heads"] * (s["d"] + 2) * 4  # max of lse; sums of w·o and w
    if total != need or any(axes != (AXIS,) for _, axes in found):
        return (f"{total:,} bytes reduced where a max of lse [B, n_h] and the sums of w·o "
                f"[B, n_h, d_h] and w [B, n_h] need {need:,}")
    return None


COMBINE = harness.Build(
    what="your combine",
    layouts=("Q[B, N, D]", "Kc[B, S_{model}, M, D]", "Vc[B, S_{model}, M, D]",
             "Valid[B, S_{model}]"),
    out="O[B, N, D]",
    axes=(AXIS,),
    cases=(((2,), _combine_sizes(3, 4, 2, 8, 16)), ((4,), _combine_sizes(3, 4, 2, 8, 16)),
           ((8,), _combine_sizes(4, 6, 3, 4, 32))),
    inputs=_combine_inputs,
    reference=lambda q, k, v, valid: attend(q, k, v, valid)[0],
    program=_combine_program,
    unavailable=ANSWERS,
    out_names=("the combined output",),
    diagnose=combine_mistake,
    extra=_combine_bytes,
    hint="A part counts in proportion to its share of the whole softmax's denominator, which "
         "its lse_i measures; and e^x of a score this large overflows.",
    praise="Flash-decoding across devices.", rtol=1e-4, atol=1e-5)


@checker("The log-sum-exp combine across devices")
def check_lse_combine(fn) -> str:
    """``fn(o, lse) -> o`` per device over the mesh axis ``"model"``: the whole context's
    output from each device's part; on 2, 4 and 8 devices, the values and the collectives:
    only all-reduces, whose bytes do not grow with the devices."""
    return harness.grade(fn, COMBINE)
