"""Check a sharded decode against single-device decoding, over several generated tokens, and
its compiled program against the plan: collectives, and the bytes each device holds."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np

from tpviz.core import compiled, validate, verify
from tpviz.core.collectives import Collectives
from tpviz.core.kinds import Size
from tpviz.devices import chosen_devices, make_mesh
from tpviz.errors import ShardingError
from tpviz.inference import model as tiny
from tpviz.inference.run import AXIS, place, program, slots
from tpviz.inference.shards import cache_per_device, check_sizes, plan, weights_per_device


class Checked(Collectives):
    """The compiled step's collectives (a :class:`Collectives`), with what else :func:`check`
    measured: ``error`` (largest relative error of the logits over the steps), ``tokens``
    (the tokens generated, ``[steps, B]``), ``cache_bytes`` (bytes of cache on each device,
    read from the arrays), ``memory`` (XLA's memory analysis of the step), ``plan`` (the
    planned collectives) and ``replicas`` (copies of the cache the devices hold together)."""

    error: float
    tokens: list
    cache_bytes: int
    memory: compiled.Memory
    plan: Collectives
    replicas: float


def _signature(found) -> Counter:
    return Counter((c.kind, c.bytes, c.group_size) for c in found if c.moves_data)


@functools.lru_cache(maxsize=8)
def _reference(config: tiny.Config):
    """The single-device prefill and step, compiled once per configuration."""
    return (jax.jit(lambda p, t: tiny.prefill(p, t, config)),
            jax.jit(lambda p, c, t, pos: tiny.decode_step(p, c, t, pos, config)))


def mesh_of(devices: int):
    """A 1D mesh (axis ``"model"``) of the first ``devices`` devices ``setup_devices`` chose."""
    available = chosen_devices()
    if devices > len(available):
        raise ShardingError(f"devices = {devices}, but only {len(available)} are set up; call "
                            f"tpviz.setup_devices({devices}) first (restart the kernel), or ask "
                            "for fewer.")
    return make_mesh((devices,), (AXIS,), devices=available[:devices])


def reference(config: tiny.Config, steps: Size(4096, "each step runs the model"), seed: int = 0
              ) -> dict:
    """Single-device decoding: the prompt prefilled, then ``steps`` greedy tokens. Returns the
    weights, the prefilled cache and first token, and each step's logits and tokens."""
    params = tiny.init(config, seed)
    fill, step = _reference(config)
    first, cache = fill(params, tiny.prompt_tokens(config, seed))
    tokens = jnp.argmax(first, axis=-1).astype(jnp.int32)
    logits, chosen, final = tiny.generate(step, params, cache, tokens, config.prompt, steps)
    return {"params": params, "cache": cache, "tokens": tokens, "logits": logits,
            "chosen": chosen, "final": final}


def check(scheme: str, devices: int = 8, steps: int = 4, *, kv_heads: int = 2,
          seed: int = 0) -> Checked:
    """Decode ``steps`` tokens of the chapter's small transformer (8 query heads, ``kv_heads``
    key/value heads, batch 8, a 32-token cache holding a 16-token prompt) with its cache split
    by ``scheme`` ("heads", "batch" or "sequence") over ``devices`` devices, and compare every
    step's logits and tokens, and the final cache, with decoding on one device. Compare the
    compiled step's collectives (kind, bytes, group size: count) with
    :func:`tpviz.inference.shards.plan`, and the bytes each device holds (its cache shards,
    XLA's argument bytes, the cache donated in place) with the plan's.

    Raises:
        ArgumentError, ShardingError: sizes that do not split (``shards.check_sizes``).
        CheckFailed: a value, a collective or a byte count differs.
    """
    base = tiny.Config()
    kv_heads = validate.integer("kv_heads", kv_heads, maximum=base.heads, error=ShardingError)
    if base.heads % kv_heads:
        raise ShardingError(f"kv_heads = {kv_heads} must divide the {base.heads} query heads.")
    config = replace(base, kv_heads=kv_heads)
    scheme, n = check_sizes(scheme, config, devices)
    steps = validate.integer("steps", steps, maximum=config.context - config.prompt)
    ref = reference(config, steps, seed)
    mesh = mesh_of(n)
    params, cache = place(scheme, mesh, ref["params"], ref["cache"], config)
    held = {s.data.nbytes for a in cache.values() for s in a.addressable_shards}
    step = compiled.compile_for(program(scheme, mesh, config), params, cache, ref["tokens"],
                                np.int32(config.prompt))
    memory = compiled.memory(step)
    logits, chosen, final = tiny.generate(step, params, cache, ref["tokens"], config.prompt,
                                          steps)
    error = max(verify.close(got, want, f"the {scheme}-sharded logits at step {i + 1}")
                for i, (got, want) in enumerate(zip(logits, ref["logits"], strict=True)))
    verify.same([verify.host(t, np.int32).tolist() for t in chosen],
                [verify.host(t, np.int32).tolist() for t in ref["chosen"]],
                f"the tokens the {scheme}-sharded decode chose")
    r = slots(config, n) // kv_heads if scheme == "heads" else 1
    for name in ("k", "v"):  # one copy of each key/value head against the reference's
        verify.close(verify.host(final[name], np.float32)[:, :, :, ::r], ref["final"][name],
                     f"the {scheme}-sharded cache's {'keys' if name == 'k' else 'values'}")
    planned = plan(scheme, config, n)
    verify.same(_signature(compiled.collectives(step)), _signature(planned),
                f"the compiled {scheme} step's collectives (kind, bytes, group size: count)")
    per_device = cache_per_device(scheme, config, n)
    verify.same(held, {per_device // 2}, "bytes of keys (and of values) on each device")
    args = weights_per_device(scheme, config, n) + per_device + 4 * (config.batch + 1)
    verify.same(memory.argument, args, f"the {scheme} step's argument bytes per device "
                "(weights, cache, tokens, position)")
    verify.same(memory.alias, per_device, "the cache the step writes in place (donated)")
    result = Checked(c for c in compiled.collectives(step) if c.moves_data)
    result.error, result.memory, result.plan = error, memory, planned
    result.tokens = [verify.host(t, np.int32).tolist() for t in chosen]
    result.cache_bytes, result.replicas = per_device, per_device * n / config.cache_bytes()
    return result
