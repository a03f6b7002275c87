"""Check the expert-parallel layer against one device and the plan's all-to-alls."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpviz.core import compiled, verify
from tpviz.core.collectives import Collectives
from tpviz.core.kinds import COMPILED, HELD, Devices, Positive, Seed, Size
from tpviz.devices import chosen_devices, make_mesh
from tpviz.errors import ShardingError
from tpviz.moe.plan import AXIS, Plan, plan, route
from tpviz.moe.run import (
    forward,
    gspmd_forward,
    gspmd_train_step,
    init,
    place,
    reference,
    reference_step,
    router_logits,
    train_step,
)


@dataclass(frozen=True)
class Check:
    """What :func:`check` measured.

    Attributes:
        output_error: largest relative error of the shard_map and GSPMD outputs and aux losses
            against the single-device reference.
        gradient_error: the same for the loss and every gradient of a training step.
        dropped: fraction of the T·k token-choices dropped.
        capacity: C, slots per expert and group (one group = the T/N tokens of a device).
        collectives: the compiled shard_map forward's (2 all-to-alls, plus the aux loss's
            all-reduce of one number).
        train: the compiled shard_map training step's.
        gspmd: the compiled GSPMD (einsum) forward's: what the compiler chose.
        gspmd_train: the compiled GSPMD training step's.
        plan: the plan the programs were checked against.
    """

    output_error: float
    gradient_error: float
    dropped: float
    capacity: int
    collectives: Collectives
    train: Collectives
    gspmd: Collectives
    gspmd_train: Collectives
    plan: Plan


def _all_to_alls(found: Collectives) -> list[tuple]:
    return [(c.kind, c.bytes, c.group_size) for c in found if c.kind == "all-to-all"]


def check(tokens: Size(2**14, HELD), experts: Size(256, COMPILED), top_k: int,
          capacity_factor: Positive, devices: Devices = 8, seed: Seed = 0,
          hidden: Size(1024, HELD) = 16, ffn: Size(4096, HELD) = 32, order: str = "before"
          ) -> Check:
    """Run a top-k MoE layer with capacity on ``devices`` devices, by ``shard_map`` with
    all-to-alls and as GShard's einsums under GSPMD; compare both with one device.

    Args:
        tokens: T, the whole batch (split into ``devices`` groups of T/N tokens).
        experts: E, split E/N per device.
        top_k: k, experts per token.
        capacity_factor: cf; C = ⌈k · (T/N) · cf / E⌉ per expert and group.
        devices: N, the devices of the mesh (the first N that ``setup_devices`` chose).
        seed: seeds the tokens, targets and weights.
        hidden, ffn: H and one expert's F (tiny by default).
        order: softmax "before" or "after" the top-k.

    Raises:
        ArgumentError, ShardingError: sizes that do not make the layer (see :func:`plan`).
        CheckFailed: an output, aux loss or gradient differs from one device's, or the compiled
            shard_map programs hold other all-to-alls than the plan's: 2 forward, 4 per step,
            each of the planned bytes.
    """
    p = plan(tokens, experts, top_k, capacity_factor, devices, hidden, ffn)
    available = chosen_devices()
    if devices > len(available):
        raise ShardingError(f"moe.check(devices={devices}): only {len(available)} devices are "
                            f"set up; call tpviz.setup_devices({devices}) first (restart the "
                            "kernel), or ask for fewer.")
    mesh = make_mesh((devices,), (AXIS,), devices=available[:devices])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, hidden), dtype=np.float32)
    target = rng.standard_normal((tokens, hidden), dtype=np.float32)
    params = init(hidden, ffn, experts, seed)
    placed = place(mesh, params)
    c, k = p.capacity, top_k
    want = reference(x, params, k, capacity_factor, devices, order)
    want_step = reference_step(x, target, params, k, capacity_factor, devices, order)

    fwd = compiled.compile_for(forward(mesh, k, c, order), x, placed)
    step = compiled.compile_for(train_step(mesh, k, c, order), x, target, placed)
    g_fwd = compiled.compile_for(gspmd_forward(mesh, k, c, order), x, placed)
    g_step = compiled.compile_for(gspmd_train_step(mesh, k, c, order), x, target, placed)
    output_error = max(verify.close(fwd(x, placed), want, "the shard_map output and aux loss"),
                       verify.close(g_fwd(x, placed), want, "the GSPMD output and aux loss"))
    gradient_error = max(
        verify.close(step(x, target, placed), want_step, "the shard_map loss and gradients"),
        verify.close(g_step(x, target, placed), want_step, "the GSPMD loss and gradients"))

    found, found_step = compiled.collectives(fwd), compiled.collectives(step)
    for what, got, training in (("forward", found, False), ("training step", found_step, True)):
        verify.same(_all_to_alls(got), _all_to_alls(p.collectives(training)),
                    f"the compiled shard_map {what}'s all-to-alls (kind, bytes, group size)")
    dropped = route(router_logits(x, params), k, capacity_factor, devices, order).dropped
    return Check(output_error, gradient_error, dropped, c, found, found_step,
                 compiled.collectives(g_fwd), compiled.collectives(g_step), p)
