"""Chapter 10's build checkers, on :mod:`tpviz.core.harness`: the expert-parallel layer's
dispatch (10.5: pack a group's kept choices into its ``[E, C, H]`` buffer, then one all-to-all)
and combine (10.6: one all-to-all back, then each token's kept results weighted by its gates).
The inputs are made by the checker: tokens, and slots from GShard's drop order on a router of
its own, with dropped choices in every case."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import harness
from tpviz.core.exercises import checker
from tpviz.moe.plan import AXIS, keep, top_k

EXPERT = (AXIS,)
# the library's layer and the routing tensors it is built from: the book's answer to both
LAYER = ("tpviz.moe.run.layer", "tpviz.moe.run.forward", "tpviz.moe.run.train_step",
         "tpviz.moe.run.dispatch_tensors", "tpviz.moe.run.gshard_layer",
         "tpviz.moe.run.gspmd_forward")
CASES = (((4,), {"E": 8, "C": 2, "H": 3, "T": 6, "k": 2}),
         ((4,), {"E": 4, "C": 3, "H": 5, "T": 8, "k": 2}),
         ((2,), {"E": 6, "C": 2, "H": 4, "T": 7, "k": 2}),
         ((8,), {"E": 8, "C": 1, "H": 2, "T": 4, "k": 1}))


def slots(experts: np.ndarray, num_experts: int, capacity: int) -> np.ndarray:
    """``slot[t, j]``: where choice j of token t sits in its group's buffer, ``e·C + c`` (c the
    order in which GShard fills expert e: every first choice by token, then every second …),
    or −1 where the choice is dropped."""
    kept = keep(experts, num_experts, capacity)
    out = np.full(experts.shape, -1, np.int32)
    used = np.zeros(num_experts, int)
    for j in range(experts.shape[1]):
        for t in range(experts.shape[0]):
            if kept[t, j]:
                e = experts[t, j]
                out[t, j] = e * capacity + used[e]
                used[e] += 1
    return out


def _routing(s: dict, rng) -> tuple[np.ndarray, np.ndarray]:
    """Every group's slots [N·T, k] and gates [N·T, k], from a router that favours the first
    experts (so some choices are dropped)."""
    n, e, t, k, c = s["devices"], s["E"], s["T"], s["k"], s["C"]
    logits = rng.standard_normal((n * t, e)) + np.linspace(1.5, 0, e)
    experts, gates = top_k(logits, k)
    where = np.concatenate([slots(experts[g * t:(g + 1) * t], e, c) for g in range(n)])
    return where, gates.astype(np.float32)


def _dispatch_inputs(s: dict, rng) -> tuple:
    where, _ = _routing(s, rng)
    x = rng.standard_normal((s["devices"] * s["T"], s["H"]), dtype=np.float32)
    return x, where


def buffers(x: np.ndarray, where: np.ndarray, n: int, e: int, c: int) -> np.ndarray:
    """Every group's buffer [N, E, C, H]: row e·C + c of group g holds the token whose choice
    sits there (zeros in unused slots)."""
    t, h = x.shape[0] // n, x.shape[1]
    out = np.zeros((n, e * c, h), x.dtype)
    for g in range(n):
        for (i, _), s in np.ndenumerate(where[g * t:(g + 1) * t]):
            if s >= 0:
                out[g, s] = x[g * t + i]
    return out.reshape(n, e, c, h)


def _dispatch_reference(x, where, case):
    n, e, c = case.n, case.sizes["E"], case.sizes["C"]
    b = buffers(np.asarray(x), np.asarray(where), n, e, c)  # [N groups, E, C, H]
    # device d: its E/N experts, the slots of every group, group 0 first: [E/N, N·C, H]
    per = b.reshape(n, n, e // n, c, -1).transpose(1, 2, 0, 3, 4)  # [d, E/N, g, C, H]
    return per.reshape(e, n * c, -1)


def _dispatch_program(answer, case):
    e, c = case.sizes["E"], case.sizes["C"]
    return jax.shard_map(lambda x, s: answer(x, s, e, c), mesh=case.mesh,
                         in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False)


def _buffer_bytes(case) -> int:
    return case.sizes["E"] * case.sizes["C"] * case.sizes["H"] * 4


DISPATCH = harness.Build(
    what="your dispatch", layouts=("X[T_{expert}, H]", "Slot[T_{expert}, K]"),
    out="Out[E_{expert}, S, H]", axes=EXPERT, program=_dispatch_program,
    inputs=_dispatch_inputs, reference=_dispatch_reference, cases=CASES,
    out_names=("the slots of this device's experts",),
    collectives=lambda case: [harness.Expect("all-to-all", _buffer_bytes(case), EXPERT,
                                             what="the [E, C, H] buffer")],
    unavailable=LAYER,
    hint="First the buffer [E, C, H] of this device's group: row e·C + c holds the token whose "
         "choice took that slot, and a dropped choice (−1) takes none. Then one exchange: "
         "block d of the experts goes to device d, and the blocks that arrive line up along "
         "the slot axis, group 0 first.",
    praise="Packed and dispatched: every group's kept choices reached their experts' devices.",
    rtol=0, atol=0)


def _combine_inputs(s: dict, rng) -> tuple:
    where, gates = _routing(s, rng)
    n, e, c, h = s["devices"], s["E"], s["C"], s["H"]
    results = rng.standard_normal((e, n * c, h), dtype=np.float32)  # [E, N·C, H] over devices
    return results, where, gates


def _combine_reference(results, where, gates, case):
    n, e, c = case.n, case.sizes["E"], case.sizes["C"]
    results, where, gates = (np.asarray(a) for a in (results, where, gates))
    t = where.shape[0] // n
    # back on group g's device: [E, C, H], slot block g of every expert
    back = results.reshape(e, n, c, -1).transpose(1, 0, 2, 3).reshape(n, e * c, -1)
    y = np.zeros((n * t, back.shape[-1]), np.float32)
    for (i, j), s in np.ndenumerate(where):
        if s >= 0:
            y[i] += gates[i, j] * back[i // t, s]
    return y


def _combine_program(answer, case):
    return jax.shard_map(answer, mesh=case.mesh, in_specs=(P(AXIS), P(AXIS), P(AXIS)),
                         out_specs=P(AXIS), check_vma=False)


COMBINE = harness.Build(
    what="your combine", layouts=("Results[E_{expert}, S, H]", "Slot[T_{expert}, K]",
                                  "Gates[T_{expert}, K]"),
    out="Y[T_{expert}, H]", axes=EXPERT, program=_combine_program, inputs=_combine_inputs,
    reference=_combine_reference, cases=CASES, out_names=("the tokens' expert outputs",),
    collectives=lambda case: [harness.Expect("all-to-all", _buffer_bytes(case), EXPERT,
                                             what="the results")],
    unavailable=LAYER,
    hint="One exchange first: slot block g of every expert goes back to device g, where the "
         "blocks line up along the expert axis as [E, C, H]. Then each token adds the result "
         "in each of its kept slots times that choice's gate; a dropped choice adds nothing.",
    praise="Every group got its results back and weighted them by the gates.",
    rtol=1e-5, atol=1e-5)


@checker("Dispatch with all_to_all")
def check_dispatch(fn) -> str:
    """Per device ``fn(x[T_g, H], slot[T_g, k], num_experts, capacity) -> [E/N, N·C, H]``:
    this group's kept choices packed into its [E, C, H] buffer (``slot`` = e·C + c, −1 for a
    dropped choice), then exchanged so that each device holds its experts' slots from every
    group, group 0 first; on 4, 2 and 8 devices at several sizes, with exactly one all-to-all
    of the buffer."""
    return harness.grade(fn, DISPATCH)


@checker("Combine with all_to_all")
def check_combine(fn) -> str:
    """Per device ``fn(results[E/N, N·C, H], slot[T_g, k], gates[T_g, k]) -> [T_g, H]``: the
    results sent back to their groups (one all-to-all), then each token's kept results summed
    with its gates; on 4, 2 and 8 devices at several sizes."""
    return harness.grade(fn, COMBINE)
