"""Checkers for the context-parallelism chapter: ring bytes, Ulysses' saving, the online-softmax
combine, the ring in ``shard_map``, the causal imbalance, and a design."""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.context.compare import layer, memory
from tpviz.context.loops import executed
from tpviz.context.plan import AXIS, LAYOUTS, SCHEMES, causal_work, plan
from tpviz.context.run import attention, block_attention
from tpviz.core import compiled
from tpviz.core.exercises import (
    Wrong,
    as_number,
    call,
    checker,
    expect_array,
    expect_bytes,
    expect_number,
    mesh_1d,
)
from tpviz.errors import TpvizError


@checker("Ring attention's bytes")
def check_ring_attention_bytes(answer) -> str:
    """Bytes each device sends in one ring-attention forward pass: N = 8, S = 32,768,
    H = 4,096, B = 1, bf16."""
    n, s, h = 8, 32768, 4096
    want = plan("ring", s, 32, h, n, dtype="bf16").sent_bytes()
    if answer == want / 2:
        raise Wrong("that counts only the keys (or only the values).", "Both travel.")
    if answer == want * n / (n - 1):
        raise Wrong("that counts N permutes.", "After the last step no block needs to move.")
    if answer == want * 2:
        raise Wrong("that counts 4 bytes per value.", "bf16 is 2 bytes.")
    expect_bytes(answer, want, hint="Each step passes this device's key and value block, "
                  "[2, S/N, H] values, to the next device.")
    return f"{want / 2**20:,.0f} MiB: 2(N-1)/N · S·H·b, the bytes of one all-gather of K and V."


@checker("Ulysses against the ring")
def check_ulysses_ratio(answer) -> str:
    """How many times fewer bytes Ulysses sends than ring attention per layer (forward), N = 16."""
    n, s, h = 16, 65536, 8192
    want = (plan("ring", s, 64, h, n).sent_bytes() / plan("ulysses", s, 64, h, n).sent_bytes())
    if answer == 1 / want:
        raise Wrong("that is the ring against Ulysses.", "Ulysses sends fewer bytes.")
    if answer == n:
        raise Wrong("that leaves out how many arrays each scheme moves.",
                    "Ring: keys and values; Ulysses: q, k, v and the output.")
    expect_number(answer, want, hint="Write both volumes per device: ring (N-1)·2·(S/N)·H·b; "
                  "an all-to-all of an [S/N, H] buffer sends (N-1)/N of it.")
    return f"{want:g} = N/2: Ulysses' bytes fall as 1/N, the ring's stay near 2·S·H·b."


@functools.cache
def _blocks():
    """Two key blocks' attention and the whole's, compiled once per process."""
    return jax.jit(lambda q, k, v: (block_attention(q, k[:, :4], v[:, :4]),
                                    block_attention(q, k[:, 4:], v[:, 4:]),
                                    block_attention(q, k, v)))


@checker("The online-softmax combine")
def check_online_combine(fn) -> str:
    """``fn(o1, lse1, o2, lse2) -> (o, lse)``: the attention of the same queries over two key
    blocks merged (``o[B, c, n, d]`` normalised, ``lse[B, c, n]``)."""
    if not callable(fn):  # before compiling the reference
        raise Wrong(f"your combine should be a function, but it is a {type(fn).__name__}.")
    rng = np.random.default_rng(3)
    blocks = _blocks()
    for scale in (1.0, 8.0, 30.0):  # large scores: a naive exp overflows
        q = (rng.standard_normal((1, 4, 2, 8)) * scale).astype(np.float32)
        k, v = (rng.standard_normal((1, 8, 2, 8)).astype(np.float32) for _ in range(2))
        first, second, (want_o, want_lse) = blocks(q, k, v)
        got = call(fn, *first, *second, what="your combine")
        if not isinstance(got, tuple) or len(got) != 2:
            raise Wrong("combine should return two arrays: (o, lse).")
        o, lse = (np.asarray(t) for t in got)
        if (o.shape == want_o.shape and np.allclose(o, (first[0] + second[0]) / 2, atol=1e-5)
                and not np.allclose(o, want_o, atol=1e-4)):
            raise Wrong("that averages the two outputs.", "Weigh each by its share of the "
                        "softmax's denominator, e^lse.")
        hint = ("lse = log(e^lse1 + e^lse2) (jnp.logaddexp), and each block's output weighed "
                "by e^(lse_i - lse).")
        expect_array(lse, np.asarray(want_lse), what="lse", rtol=1e-4, atol=1e-4, hint=hint)
        expect_array(o, np.asarray(want_o), what="o", rtol=1e-4, atol=1e-4, hint=hint)
    return "that is FlashAttention's running max and sum, one block at a time."


def _ring_case():
    rng = np.random.default_rng(4)
    return tuple(rng.standard_normal((1, 32, 2, 8), dtype=np.float32) for _ in range(3))


@checker("The ring in shard_map")
def check_ring_step(fn) -> str:
    """``fn(q, k, v)`` per device (inside ``shard_map`` over axis ``"context"`` of 4 devices,
    ``[B, S/N, n_h, d_h]`` each): non-causal ring attention, one stacked key/value block
    passed round the ring N - 1 times."""
    n = 4
    mesh = mesh_1d(n, AXIS)
    q, k, v = _ring_case()
    seq = P(None, AXIS)
    program = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(seq,) * 3, out_specs=seq))
    got = call(program, q, k, v, what="your ring inside shard_map")
    expect_array(np.asarray(got), np.asarray(attention(q, k, v)), what="the output (all "
                 "devices)", rtol=1e-4, atol=1e-4,
                 hint="After each permute, attend to the block now held and merge it with "
                      "combine; the first block is the device's own.")
    try:
        found = [c for c in executed(compiled.compile_for(program, q, k, v)) if c.moves_data]
    except TpvizError as e:
        raise Wrong(f"the program's collectives could not be read: {e}") from None
    kinds = {c.kind for c in found}
    if kinds != {"collective-permute"}:
        raise Wrong(f"the values are right, but the program holds {sorted(kinds)}: the ring "
                    "moves blocks with ppermute only.")
    block = 2 * q.size // n * 4
    if len(found) == 2 * (n - 1) and all(c.bytes == block // 2 for c in found):
        raise Wrong("keys and values travel in separate permutes: twice the messages.",
                    "Stack them into one block, jnp.stack([k, v]), and pass that.")
    if len(found) != n - 1:
        raise Wrong(f"the program runs {len(found)} permutes; N = {n} devices need N - 1.",
                    "The last block needs no passing on." if len(found) > n - 1 else "")
    if any(c.bytes != block for c in found):
        raise Wrong(f"a permute moves {found[0].bytes:,} bytes; the key/value block is "
                    f"{block:,}.")
    return f"{n - 1} permutes of {block:,} bytes, read from the compiled program."


@checker("The causal imbalance")
def check_causal_imbalance(answer) -> str:
    """Causal ring attention, contiguous layout, N = 8: the busiest device's work over the mean
    (blocks the mask hides entirely are skipped)."""
    work = causal_work(8, "contiguous")
    want = max(work) / (sum(work) / len(work))
    if answer == 8:
        raise Wrong("that is the busiest over the least busy device.", "Divide by the mean.")
    if answer == 2:
        raise Wrong("that is the ratio for a mask that halved every device's work evenly.",
                    "Count the blocks device i needs: i + 1.")
    expect_number(answer, want, rel=1e-3, hint="Device i attends to blocks 0 … i.")
    return f"{want:.3f} = 2N/(N+1): the step waits for the last device."


# Exercise 9.6 (design): a causal model, 32 heads, H = 4,096, S = 65,536, 16 devices of
# one NVLink domain, 4 GiB per device for one layer's attention activations, bf16
DESIGN = {"sequence": 65536, "heads": 32, "hidden": 4096, "devices": 16, "budget": 4 * 2**30,
          "system": "H100 (NVLink)"}


@checker("Choose a scheme and a layout")
def check_context_design(scheme, layout, gib) -> str:
    """The fastest scheme (of SCHEMES) and layout (of LAYOUTS) for :data:`DESIGN` whose
    activations fit the budget and whose causal work is balanced, and its activations in GiB
    (:func:`tpviz.context.compare.memory`)."""
    d = DESIGN
    if scheme not in SCHEMES or layout not in LAYOUTS:
        raise Wrong(f"choose scheme from {SCHEMES} and layout from {LAYOUTS}.")
    args = (d["sequence"], d["heads"], d["hidden"], d["devices"])
    need = memory(scheme, *args)
    gib = as_number(gib, "the activations in GiB")
    if not np.isclose(gib, need / 2**30, rtol=0.02):
        raise Wrong(f"your scheme's activations are not {gib:g} GiB.",
                    "Use tpviz.context.compare.memory(scheme, S, heads, H, N).")
    if need > d["budget"]:
        raise Wrong(f"{scheme} needs {need / 2**30:.1f} GiB per device: over the budget.")
    if scheme == "ring" and layout == "contiguous":
        raise Wrong("the contiguous layout leaves the last device with 2N/(N+1) of the mean "
                    "work under the causal mask.", "Give each device an early and a late chunk.")
    if scheme != "ring" and layout != "contiguous":
        raise Wrong(f"{scheme} sees the whole sequence after its gather: the layout is the "
                    "plain one.")
    fits = [s for s in SCHEMES if memory(s, *args) <= d["budget"]]
    fastest = min(fits, key=lambda s: layer(s, *args, d["system"], causal=True).time_s)
    if scheme != fastest:
        raise Wrong(f"{scheme} fits, but another scheme that fits is faster per layer.")
    return f"{scheme}, {layout}: {need / 2**30:.2f} GiB of activations per device."
