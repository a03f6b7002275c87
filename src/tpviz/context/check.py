"""Check each scheme against full attention on one device and its compiled collectives against
the plan."""

from __future__ import annotations

from collections import Counter

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.context.loops import executed
from tpviz.context.plan import AXIS, check_sizes, plan
from tpviz.context.run import SPECS, place, program, reference, to_layout, with_gradients
from tpviz.core import compiled, validate, verify
from tpviz.core.collectives import Collectives
from tpviz.core.kinds import HELD, Devices, Seed, Size
from tpviz.devices import chosen_devices, make_mesh
from tpviz.errors import ShardingError

HEAD_DIM = 8  # d_h of the checked layers (small: the check is about the schedule, not the size)
SCORES = 2**25  # scores the reference attention may hold (128 MB of float32)


class Checked(Collectives):
    """The compiled forward pass's collectives (a :class:`Collectives`), with what else
    :func:`check` measured as attributes: ``train`` (the compiled forward-and-backward
    program's collectives), ``forward_error`` and ``gradient_error`` (largest relative errors
    against one device), ``layout`` and ``plan`` (the planned forward collectives)."""

    train: Collectives
    forward_error: float
    gradient_error: float
    layout: str
    plan: Collectives


def _signature(found) -> Counter:
    return Counter((c.kind, c.bytes, c.group_size) for c in found if c.moves_data)


def mesh_of(devices: Devices, axis: str = AXIS):
    """A 1D mesh of the first ``devices`` devices that ``setup_devices`` chose."""
    available = chosen_devices()
    if devices > len(available):
        raise ShardingError(f"devices = {devices}, but only {len(available)} are set up; call "
                            f"tpviz.setup_devices({devices}) first (restart the kernel), or ask "
                            "for fewer.")
    return make_mesh((devices,), (axis,), devices=available[:devices])


def inputs(scheme: str, sequence: Size(2**20, HELD), heads: Size(1024, HELD),
           batch: Size(1024, HELD) = 1, seed: Seed = 0, head_dim: Size(1024, HELD) = HEAD_DIM
           ) -> tuple:
    """Seeded float32 inputs of one layer: ``(q, k, v)`` ``[B, S, n_h, d_h]``, or ``(x,
    params)`` for "sequence" (``x[B, S, H]``, weights ``wq, wk, wv, wo: [H, H]``)."""
    validate.bounded("batch × sequence × heads × head_dim", batch * sequence * heads * head_dim,
                     2**25, "Use fewer tokens or heads.", ShardingError)
    rng = np.random.default_rng(seed)
    h = heads * head_dim
    if scheme == "sequence":
        params = {k: (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32) for k in SPECS}
        return rng.standard_normal((batch, sequence, h), dtype=np.float32), params
    return tuple(rng.standard_normal((batch, sequence, heads, head_dim), dtype=np.float32)
                 for _ in range(3))


def check(scheme: str, sequence: int, heads: int, devices: Devices = 8, causal: bool = False, *,
          layout: str | None = None, batch: int = 1, seed: Seed = 0) -> Checked:
    """Run ``scheme`` ("sequence", "ring" or "ulysses") on a mesh of ``devices`` devices and
    compare it with full attention on one device, forward and gradients; compare the compiled
    collectives (kinds, counts, bytes, group sizes) with :func:`tpviz.context.plan`.

    Args:
        scheme: "sequence" (Megatron's sequence parallelism around an attention block), "ring"
            or "ulysses".
        sequence: S, tokens (a multiple of N; of 2N for the zigzag layout).
        heads: n_h, attention heads of width 8 (sequence and ulysses: a multiple of N).
        devices: N.
        causal: mask each query's later keys.
        layout: the ring's token layout, "contiguous" or "zigzag" (default: zigzag when causal).
        batch, seed: B, and the seed of the inputs.

    Returns:
        The compiled forward pass's collectives, as :class:`Checked`.

    Raises:
        ArgumentError, ShardingError: sizes that do not split (see ``plan.check_sizes``).
        CheckFailed: an output or gradient differs from one device's, or the compiled programs
            hold other collectives than the plan's.
    """
    causal = validate.flag("causal", causal)
    heads = validate.integer("heads", heads, error=ShardingError)
    validate.bounded("batch × heads × sequence²", batch * heads * sequence**2, SCORES,
                     "Use a shorter sequence: the reference holds every score.", ShardingError)
    layout = layout or ("zigzag" if causal and scheme == "ring" else "contiguous")
    scheme, s, a, n, h, layout = check_sizes(scheme, sequence, heads, devices,
                                             heads * HEAD_DIM, layout)
    if layout == "zigzag" and scheme != "ring":
        raise ShardingError(f"layout = 'zigzag' is for the ring scheme; {scheme} needs "
                            "layout='contiguous'.")
    mesh = mesh_of(n)
    args = inputs(scheme, s, a, batch, seed)
    rng = np.random.default_rng(seed + 1)
    out_shape = args[0].shape
    ct = rng.standard_normal(out_shape, dtype=np.float32)
    fn = program(scheme, mesh, causal, layout, HEAD_DIM)
    seq = P(None, AXIS)
    if scheme == "sequence":
        specs = {k: P(*(AXIS if d else None for d in v)) for k, v in SPECS.items()}
        placed = (place(mesh, args[0], seq), {k: place(mesh, w, specs[k])
                                              for k, w in args[1].items()})
    else:
        placed = tuple(place(mesh, to_layout(t, n, layout), seq) for t in args)
    ct_placed = place(mesh, to_layout(ct, n, layout), seq)

    forward = compiled.compile_for(fn, *placed)
    train = compiled.compile_for(with_gradients(fn), *placed, ct_placed)
    want_out, want_grads = jax.jit(with_gradients(reference(scheme, causal, HEAD_DIM)))(*args, ct)
    got_out, got_grads = train(*placed, ct_placed)

    def back(t):  # the layout's order back to the sequence's
        return to_layout(t, n, layout, inverse=True) if scheme != "sequence" else t

    forward_error = max(verify.close(back(forward(*placed)), want_out,
                                     f"the {scheme} forward pass's output"),
                        verify.close(back(got_out), want_out,
                                     f"the {scheme} training program's output"))
    gradient_error = verify.close(jax.tree.map(back, got_grads) if scheme != "sequence"
                                  else got_grads, want_grads, f"the {scheme} gradients")
    planned = plan(scheme, s, a, h, n, batch=batch)
    for what, program_, training in (("forward pass", forward, False),
                                     ("forward and backward program", train, True)):
        verify.same(_signature(executed(program_)),
                    _signature(plan(scheme, s, a, h, n, batch=batch, training=training)),
                    f"the compiled {scheme} {what}'s collectives (kind, bytes, group size: count)")
    result = Checked(c for c in executed(forward) if c.moves_data)
    result.train = Collectives(c for c in executed(train) if c.moves_data)
    result.forward_error, result.gradient_error = forward_error, gradient_error
    result.layout, result.plan = layout, planned
    return result


def temporaries(scheme: str, sequence: int, heads: int, devices: Devices = 8,
                causal: bool = False) -> int:
    """Bytes of temporaries per device of the compiled forward pass (XLA's
    ``memory_analysis()``), float32, heads of width 8: what the scheme holds besides its
    inputs and output, to set beside :func:`tpviz.context.compare.memory`."""
    scheme, s, a, n, _, _ = check_sizes(scheme, sequence, heads, devices, heads * HEAD_DIM)
    validate.bounded("heads × sequence²", a * s**2, SCORES, "Use a shorter sequence.",
                     ShardingError)
    mesh = mesh_of(n)
    args = inputs(scheme, s, a)
    seq = P(None, AXIS)
    if scheme == "sequence":
        specs = {k: P(*(AXIS if d else None for d in v)) for k, v in SPECS.items()}
        placed = (place(mesh, args[0], seq), {k: place(mesh, w, specs[k])
                                              for k, w in args[1].items()})
    else:
        placed = tuple(place(mesh, t, seq) for t in args)
    return compiled.memory(program(scheme, mesh, causal, head_dim=HEAD_DIM), *placed).temp
