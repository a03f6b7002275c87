"""Check each scheme against full attention on one device and its compiled collectives against
the plan; measure what the compiled programs hold."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.context.loops import executed
from tpviz.context.plan import AXIS, RING_AXIS, ULYSSES_AXIS, check_sizes, plan
from tpviz.context.run import SPECS, place, program, reference, to_layout, with_gradients
from tpviz.core import compiled, validate, verify
from tpviz.core.collectives import Collectives
from tpviz.core.kinds import HELD, Devices, KeywordsOf, Seed, Size
from tpviz.devices import chosen_devices, make_mesh
from tpviz.errors import ShardingError

HEAD_DIM = 8  # d_h of the checked layers (small: the check is about the schedule, not the size)
SCORES = 2**25  # scores the reference attention may hold (128 MB of float32)


class Checked(Collectives):
    """The compiled forward pass's collectives (a :class:`Collectives`), with what else
    :func:`check` measured as attributes: ``train`` (the compiled forward-and-backward
    program's collectives), ``forward_error`` and ``gradient_error`` (largest relative errors
    against one device, over every seed), ``errors`` (per seed: (forward, gradient)),
    ``layout``, ``plan`` (the planned forward collectives), ``programs`` (the compiled
    forward and backward programs of :func:`split`) and ``saved`` (bytes per device of the
    residuals the forward pass keeps for the backward: :func:`saved_bytes`)."""

    train: Collectives
    programs: tuple
    saved: int
    forward_error: float
    gradient_error: float
    errors: list
    layout: str
    plan: Collectives


def _signature(found) -> Counter:
    return Counter((c.kind, c.bytes, c.group_size) for c in found if c.moves_data)


def mesh_of(devices: Devices, axis: str = AXIS, ulysses: int | None = None):
    """A 1D mesh of the first ``devices`` devices that ``setup_devices`` chose; with ``ulysses``
    = u, usp's 2D mesh ``("ring", "ulysses")`` of N/u × u (a Ulysses group: u neighbours)."""
    available = chosen_devices()
    if devices > len(available):
        raise ShardingError(f"devices = {devices}, but only {len(available)} are set up; call "
                            f"tpviz.setup_devices({devices}) first (restart the kernel), or ask "
                            "for fewer.")
    if ulysses is not None:
        if devices % ulysses:
            raise ShardingError(f"ulysses = {ulysses} must divide devices = {devices} (usp's "
                                f"mesh is devices/ulysses × ulysses).")
        return make_mesh((devices // ulysses, ulysses), (RING_AXIS, ULYSSES_AXIS),
                         devices=available[:devices])
    return make_mesh((devices,), (axis,), devices=available[:devices])


def inputs(scheme: str, sequence: Size(2**20, HELD), heads: Size(1024, HELD),
           batch: Size(1024, HELD) = 1, seed: Seed = 0, head_dim: Size(1024, HELD) = HEAD_DIM,
           kv_heads: Size(1024, HELD) | None = None) -> tuple:
    """Seeded float32 inputs of one layer: ``(q, k, v)``, ``q[B, S, n_h, d_h]`` and ``k, v[B, S,
    n_kv, d_h]``, or ``(x, params)`` for "sequence" (``x[B, S, H]``, weights ``wq, wo: [H, H]``,
    ``wk, wv: [H, n_kv · d_h]``)."""
    validate.bounded("batch × sequence × heads × head_dim", batch * sequence * heads * head_dim,
                     2**25, "Use fewer tokens or heads.", ShardingError)
    rng = np.random.default_rng(seed)
    h, kv = heads * head_dim, (kv_heads or heads) * head_dim
    if scheme == "sequence":
        cols = {"wq": h, "wk": kv, "wv": kv, "wo": h}
        params = {k: (rng.standard_normal((h, cols[k])) / np.sqrt(h)).astype(np.float32)
                  for k in SPECS}
        return rng.standard_normal((batch, sequence, h), dtype=np.float32), params
    return tuple(rng.standard_normal((batch, sequence, n, head_dim), dtype=np.float32)
                 for n in (heads, kv_heads or heads, kv_heads or heads))


def _setup(z, causal: bool, options: dict):
    """The mesh, the program, a placing function and the layout's device count for sizes z."""
    mesh = mesh_of(z.devices, ulysses=z.ulysses if z.scheme == "usp" else None)
    fn = program(z.scheme, mesh, causal, z.layout, HEAD_DIM, **options)
    seq = P(None, (RING_AXIS, ULYSSES_AXIS)) if z.scheme == "usp" else P(None, AXIS)
    spread = z.ring if z.scheme == "usp" else z.devices  # the ring's devices set the layout

    def placed(args):
        if z.scheme == "sequence":
            specs = {k: P(*(AXIS if d else None for d in v)) for k, v in SPECS.items()}
            return (place(mesh, args[0], seq), {k: place(mesh, w, specs[k])
                                                for k, w in args[1].items()})
        return tuple(place(mesh, to_layout(t, spread, z.layout), seq) for t in args)

    return mesh, fn, placed, spread, seq


def split(fn, *args):
    """The training program as a network runs it, forward and backward apart: ``saving`` (the
    forward pass that also returns what the backward keeps, ``jax.vjp``'s residuals) and
    ``backward`` (residuals and the output's cotangent to the gradients), both compiled.
    Compiled apart, XLA cannot merge a collective of the backward with the forward's (as it
    would, recomputation or not, in one program)."""
    saving = compiled.compile_for(lambda *a: jax.vjp(fn, *a), *args)
    out, pullback = saving(*args)
    backward = compiled.compile_for(lambda pb, ct: pb(ct), pullback, out)
    return saving, backward


def saved_bytes(pullback) -> int:
    """Bytes one device holds of the residuals a ``jax.vjp`` pullback keeps (real arrays)."""
    return sum(a.addressable_shards[0].data.nbytes for a in jax.tree.leaves(pullback))


def check(scheme: str, sequence: int, heads: int, devices: Devices = 8, causal: bool = False, *,
          layout: str | None = None, batch: int = 1, seed: Seed = 0, seeds: int = 1,
          kv_heads: int | None = None, ulysses: int | None = None, recompute: bool = True,
          regather: bool = False) -> Checked:
    """Run ``scheme`` on a mesh of ``devices`` devices and compare it with full attention on one
    device, forward and gradients; compare the compiled collectives (kinds, counts, bytes,
    group sizes) of the forward pass and of the backward pass (compiled apart: :func:`split`)
    with :func:`tpviz.context.plan`.

    Args:
        scheme: "sequence" (Megatron's sequence parallelism around an attention block), "ring",
            "ulysses", "allgather" (Llama 3) or "usp" (Ulysses inside, a ring across).
        sequence: S, tokens (a multiple of N; of 2N for the zigzag layout).
        heads: n_h, attention heads of width 8; ``kv_heads``: n_kv (default n_h).
        devices: N.
        causal: mask each query's later keys.
        layout: "contiguous", "zigzag" or "striped" (default: zigzag when causal and the scheme
            can use it).
        batch: B. seed, seeds: the inputs of seeds ``seed`` … ``seed + seeds - 1``, all run on
            the same compiled programs.
        ulysses: usp's u. recompute: ring's backward (see :func:`tpviz.context.ring_attention`).
        regather: sequence's backward (see :func:`tpviz.context.sequence_parallel_block`).

    Returns:
        The compiled forward pass's collectives, as :class:`Checked`.

    Raises:
        ArgumentError, ShardingError: sizes that do not split (see ``plan.check_sizes``).
        CheckFailed: an output or gradient differs from one device's, or the compiled programs
            hold other collectives than the plan's.
    """
    causal = validate.flag("causal", causal)
    seeds = validate.integer("seeds", seeds, maximum=100)
    heads = validate.integer("heads", heads, error=ShardingError)
    validate.bounded("batch × heads × sequence²", batch * heads * sequence**2, SCORES,
                     "Use a shorter sequence: the reference holds every score.", ShardingError)
    zig = causal and scheme in ("ring", "allgather", "usp")
    z = check_sizes(scheme, sequence, heads, devices, heads * HEAD_DIM,
                    layout or ("zigzag" if zig else "contiguous"), kv_heads=kv_heads,
                    ulysses=ulysses)
    options = {"recompute": recompute, "regather": regather}
    mesh, fn, placed, spread, seq = _setup(z, causal, options)
    saving, backward = split(fn, *placed(inputs(z.scheme, z.sequence, z.heads, batch, seed,
                                                kv_heads=z.kv_heads)))
    want_fn = jax.jit(with_gradients(reference(z.scheme, causal, HEAD_DIM)))

    def back(t):  # the layout's order back to the sequence's
        return to_layout(t, spread, z.layout, inverse=True) if z.scheme != "sequence" else t

    errors, saved = [], 0
    for s in range(seed, seed + seeds):
        args = inputs(z.scheme, z.sequence, z.heads, batch, s, kv_heads=z.kv_heads)
        ct = np.random.default_rng(s + 1).standard_normal(args[0].shape, dtype=np.float32)
        want_out, want_grads = want_fn(*args, ct)
        got_out, pullback = saving(*placed(args))
        saved = saved_bytes(pullback)
        got_grads = backward(pullback, place(mesh, to_layout(ct, spread, z.layout), seq))
        what = f"the {z.scheme} {{}} (seed {s})"
        grads = jax.tree.map(back, got_grads) if z.scheme != "sequence" else got_grads
        errors.append((verify.close(back(got_out), want_out, what.format("output")),
                       verify.close(grads, want_grads, what.format("gradients"))))
    sizes = dict(batch=batch, kv_heads=z.kv_heads, ulysses=z.ulysses if z.scheme == "usp"
                 else None, **options)
    forward_found = Collectives(c for c in executed(saving) if c.moves_data)
    train_found = Collectives(forward_found + [c for c in executed(backward) if c.moves_data])
    for what, found, training in (("forward pass", forward_found, False),
                                  ("forward and backward passes", train_found, True)):
        verify.same(_signature(found),
                    _signature(plan(z.scheme, z.sequence, z.heads, z.hidden, z.devices,
                                    training=training, **sizes)),
                    f"the compiled {z.scheme} {what}' collectives (kind, bytes, group size: "
                    "count)")
    result = Checked(forward_found)
    result.train, result.errors, result.programs = train_found, errors, (saving, backward)
    result.saved = saved
    result.forward_error = max(e[0] for e in errors)
    result.gradient_error = max(e[1] for e in errors)
    result.layout, result.plan = z.layout, plan(z.scheme, z.sequence, z.heads, z.hidden,
                                                z.devices, **sizes)
    return result


def _built(scheme, sequence, heads, devices, causal, kv_heads, ulysses, recompute, regather):
    z = check_sizes(scheme, sequence, heads, devices, heads * HEAD_DIM, kv_heads=kv_heads,
                    ulysses=ulysses)
    mesh, fn, placed, _, seq = _setup(z, validate.flag("causal", causal),
                                      {"recompute": recompute, "regather": regather})
    return mesh, fn, placed(inputs(z.scheme, z.sequence, z.heads, kv_heads=z.kv_heads)), seq


def measure(scheme: str, sequence: int, heads: int, devices: Devices = 8, causal: bool = False, *,
            kv_heads: int | None = None, ulysses: int | None = None) -> compiled.Memory:
    """XLA's ``memory_analysis()`` of the compiled forward pass, float32, heads of width 8,
    contiguous layout: bytes per device. The compiled program does not depend on the inputs'
    values: one compile is the measurement."""
    _, fn, args, _ = _built(scheme, sequence, heads, devices, causal, kv_heads, ulysses, True,
                            False)
    return compiled.memory(fn, *args)


@dataclass(frozen=True)
class Training:
    """What training one layer holds per device, measured (bytes).

    Attributes:
        saved: the residuals the forward pass keeps for the backward (``jax.vjp``'s, real
            arrays: one device's shards), the layer's inputs among them.
        forward, backward: XLA's ``memory_analysis()`` of the two programs of :func:`split`
            (the forward's output holds the residuals).
        fused: of forward and backward compiled as one program (its temporaries hold what
            the backward keeps and its working set), when asked for (else None).
    """

    saved: int
    forward: compiled.Memory
    backward: compiled.Memory
    fused: compiled.Memory | None = None


def training_memory(scheme: str, sequence: int, heads: int, devices: int = 8,
                    causal: bool = False, *, kv_heads: int | None = None,
                    ulysses: int | None = None, recompute: bool = True,
                    regather: bool = False, fused: bool = False) -> Training:
    """What one layer's training holds per device (:class:`Training`), float32, heads of
    width 8, contiguous layout; ``recompute`` and ``regather`` as in :func:`check`; ``fused``:
    also compile forward and backward as one program."""
    mesh, fn, args, seq = _built(scheme, sequence, heads, devices, causal, kv_heads, ulysses,
                                 recompute, regather)
    saving, backward = split(fn, *args)
    _, pullback = saving(*args)
    one = None
    if validate.flag("fused", fused):
        ct = place(mesh, np.zeros(jax.tree.leaves(args)[0].shape, np.float32), seq)
        one = compiled.memory(with_gradients(fn), *args, ct)
    return Training(saved_bytes(pullback), compiled.memory(saving), compiled.memory(backward),
                    one)


def temporaries(scheme: str, sequence: int, heads: int, devices: Devices = 8,
                causal: bool = False, **options: KeywordsOf(measure)) -> int:
    """Bytes of temporaries per device of the compiled forward pass (:func:`measure`): what the
    scheme holds besides its inputs and output, to set beside
    :func:`tpviz.context.compare.memory`."""
    return measure(scheme, sequence, heads, devices, causal, **options).temp
