"""Checkers for the ZeRO chapter."""

from __future__ import annotations

import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import build
from tpviz.core.exercises import (
    Wrong,
    as_integer,
    as_number,
    checker,
    expect_array,
    expect_bytes,
    expect_number,
    mesh_1d,
)
from tpviz.zero.plan import communication, memory, smallest_devices


@checker("Memory per device under ZeRO")
def check_zero_memory(answer) -> str:
    """GPT-2 XL (1.5B parameters), mixed-precision Adam, ZeRO stage 2 on 16 devices: GB/device."""
    answer = as_number(answer)  # NumPy, JAX, Fraction: the same number
    psi, n = 1.5e9, 16
    want = memory(psi, n, 2).total / 1e9
    for stage, text in ((0, "plain data parallelism (stage 0)"), (1, "stage 1"),
                        (3, "stage 3")):
        if np.isclose(answer, memory(psi, n, stage).total
                                                          / 1e9, rtol=1e-3):
            raise Wrong(f"that is {text}.", "Stage 2 partitions the gradients and the optimizer "
                        "state; each device keeps all 2Ψ bytes of parameters.")
    if np.isclose(answer, 16 * psi / 1e9):
        raise Wrong("that is 16Ψ: nothing partitioned.", "Divide the partitioned parts by N.")
    expect_number(answer, want, rel=1e-3, hint="2Ψ + (2 + 12)Ψ / N bytes, in GB (10⁹ bytes).")
    return f"{want:.3f} GB per device instead of {16 * psi / 1e9:.0f} GB."


@checker("Fewest devices")
def check_fewest_devices(answer) -> str:
    """A 13B-parameter model, mixed-precision Adam, ZeRO stage 2, 40 GB per device: the fewest
    devices on which its training state fits."""
    answer = as_integer(answer, "your answer")  # NumPy and JAX integers too
    want = smallest_devices(13e9, 2, 40e9)
    if answer == smallest_devices(13e9, 3, 40e9):
        raise Wrong("that is enough for stage 3, where the parameters are partitioned too.",
                    "At stage 2 every device keeps all 2Ψ bytes of parameters.")
    if answer == want - 1:
        raise Wrong(f"with {answer} devices it needs slightly more than 40 GB.",
                    "Round up: 2Ψ + 14Ψ/N <= 40 GB.")
    if answer > want:
        raise Wrong(f"{answer} devices work, but fewer do too.", "Solve 2Ψ + 14Ψ/N <= 40 GB.")
    expect_bytes(answer, want, hint="Solve 26 GB + 182 GB / N <= 40 GB for the smallest N.")
    return f"{want} devices: {memory(13e9, want, 2).total / 1e9:.1f} GB each."


@checker("The stage-2 gradient reduce-scatter")
def check_grad_reduce_scatter(fn) -> str:
    """``fn(g)`` per device, inside shard_map over the 8-device axis "data": from this device's
    whole gradient vector, return its 1/8 slice of the mean gradient over the devices."""
    mesh = mesh_1d(8, "data")
    grads = np.random.default_rng(0).standard_normal((8, 64), dtype=np.float32)  # row d: device d
    hint = ("One collective both sums over 'data' and leaves each device only its 1/8 "
            "(chapter 1); then make the sum a mean.")
    body = (lambda g: fn(g[0])) if callable(fn) else fn
    ran = build.run(body, mesh, P("data"), P("data"), grads, what="your function")
    got, mean = ran.out, grads.mean(axis=0)
    if getattr(got, "shape", None) == (512,):
        raise Wrong("each device returned the whole vector: that is an all-reduce.",
                    "Keep only this device's 1/8 of the sum.")
    if got.shape == (64,) and np.allclose(got, 8 * mean, rtol=1e-4, atol=1e-5):
        raise Wrong("that is the sum over the devices, not the mean.", "Divide by 8.")
    expect_array(got, mean, what="the gathered slices", rtol=1e-4, atol=1e-5, hint=hint)
    found = build.moving(ran.program, mesh)
    if build.kinds(found) != {"reduce-scatter": 1}:
        raise Wrong(f"right values, but the compiled program holds {build.summary(found)}; "
                    "stage 2 needs one reduce-scatter, half an all-reduce's bytes.", hint)
    return "One reduce-scatter: (N-1)/N of the gradient bytes, half an all-reduce."


ZERO1_T = 3  # the Adam step the ZeRO-1 check runs


def _zero1_data():
    rng = np.random.default_rng(5)
    params = rng.standard_normal(64, dtype=np.float32)
    grads = rng.standard_normal((8, 64), dtype=np.float32)  # row d: device d's gradient
    m = (rng.standard_normal(64) / 10).astype(np.float32)
    v = (rng.random(64) / 10).astype(np.float32)
    return params, grads, m, v


@checker("A ZeRO-1 optimizer step")
def check_zero1_step(fn) -> str:
    """``fn(params, grad, m, v)`` per device on 8 devices along "data": params f32[64] whole on
    every device, grad this device's own f32[64] gradient, m and v its 1/8 of Adam's moments
    (f32[8]); returns the updated (params whole, m, v) after Adam step t = 3 on the mean
    gradient. The compiled step: one reduce-scatter and one all-gather of 64 floats."""
    from tpviz.zero.run import adam

    params, grads, m, v = _zero1_data()
    mesh = mesh_1d(8, "data")
    body = (lambda p, g, m_, v_: fn(p, g[0], m_, v_)) if callable(fn) else fn
    ran = build.run(body, mesh, (P(), P("data"), P("data"), P("data")),
                    (P(), P("data"), P("data")), params, grads, m, v,
                    what="your optimizer step")
    try:
        new_p, new_m, new_v = ran.out
    except (TypeError, ValueError):
        raise Wrong("return three arrays: (params, m, v).") from None
    want_p, want_m, want_v = (np.asarray(a) for a in adam(params, grads.mean(0), m, v, ZERO1_T))
    hint = ("Each device updates only the slice of the parameters whose Adam state it holds, "
            "with the mean gradient of that slice; then every device needs all the slices.")
    expect_array(new_m, want_m, what="the new m", rtol=1e-4, atol=1e-6, hint=hint)
    expect_array(new_v, want_v, what="the new v", rtol=1e-4, atol=1e-7, hint=hint)
    expect_array(new_p, want_p, what="the new parameters", rtol=1e-4, atol=1e-6, hint=hint)
    found = build.moving(ran.program, mesh)
    counts, seen = build.kinds(found), build.summary(found)
    vector = params.nbytes
    if counts.get("all-reduce"):
        raise Wrong(f"right values, but the compiled step holds {seen}: an all-reduce sends "
                    "twice the bytes of a reduce-scatter or an all-gather, and leaves whole "
                    "what this device does not need whole.", hint)
    if any(c.full_bytes > vector for c, _ in found):
        raise Wrong(f"right values, but the compiled step holds {seen}: more bytes than one "
                    f"gradient or parameter vector ({vector} bytes) per collective.", hint)
    if counts != {"reduce-scatter": 1, "all-gather": 1}:
        raise Wrong(f"right values, but the compiled step holds {seen}; ZeRO-1 needs one "
                    "reduce-scatter of the gradients and one all-gather of the parameters.",
                    hint)
    return ("A reduce-scatter and an all-gather: data parallelism's bytes, with 1/8 of Adam's "
            "state and of its work on each device.")


@checker("Stage 3's bytes")
def check_stage3_bytes(answer) -> str:
    """GPT-2 XL (1.5B bf16 parameters), ZeRO stage 3 on 16 devices: GB each device sends per
    step with ring collectives (two all-gathers of the parameters and one reduce-scatter)."""
    answer = as_number(answer)
    psi, n = 1.5e9, 16
    want = communication(psi, n, 3) / 1e9
    if np.isclose(answer, communication(psi, n, 0) / 1e9, rtol=1e-3):
        raise Wrong("that is data parallelism's all-reduce (stages 0–2).",
                    "Stage 3 dropped the parameters after the forward pass.")
    if np.isclose(answer, 3 * 2 * psi / 1e9, rtol=1e-3):
        raise Wrong("a ring collective sends (N−1)/N of the array, not all of it.",
                    "Apply the ring factor to each of the three collectives.")
    expect_number(answer, want, rel=1e-3, hint="Count the collectives of one step and the ring "
                  "bytes of each; 2 bytes per parameter.")
    return f"{want:.3f} GB: 1.5× data parallelism's."


@checker("Measured stage-3 ratio")
def check_stage3_ratio(answer) -> str:
    """The ratio of stage 3's bytes to data parallelism's in the chapter's compiled step, for
    L = 24 layers (the first layer's backward gather is not needed)."""
    answer = as_number(answer)
    layers = 24
    want = (3 * layers - 1) / (2 * layers)
    if np.isclose(answer, 1.5):
        raise Wrong("1.5 is the limit for many layers.", "One gather of the 2L is missing.")
    if np.isclose(answer, (3 * 4 - 1) / 8):
        raise Wrong("that is the chapter's 4-layer ratio.", "Redo it for 24 layers.")
    expect_number(answer, want, rel=1e-6, hint="Count the gathers and the reduce-scatters of "
                  "L layers, each of one layer's bytes, against data parallelism's L all-reduces.")
    return f"{want:.4f}: (3L − 1)/(2L)."


ZERO_DESIGN = {"params": 20e9, "memory": 80e9, "activations": 20e9, "devices": 16}


@checker("Design: a ZeRO stage and a device count")
def check_zero_design(stage, devices, gb_sent) -> str:
    """20B parameters, mixed-precision Adam, 80 GB devices with 20 GB kept for activations, up
    to 16 devices: the stage and device count whose state fits with the fewest bytes sent per
    device per step, and those bytes in GB."""
    stage, devices = as_integer(stage, "the stage"), as_integer(devices, "the devices")
    psi, room = ZERO_DESIGN["params"], ZERO_DESIGN["memory"] - ZERO_DESIGN["activations"]
    if stage not in range(4) or devices not in range(1, ZERO_DESIGN["devices"] + 1):
        raise Wrong("the stage is 0–3 and the devices 1–16.")
    options = [(s, n) for s in range(4) for n in range(1, ZERO_DESIGN["devices"] + 1)
               if memory(psi, n, s).total <= room]
    want = min(options, key=lambda o: (communication(psi, o[1], o[0]), o[1]))
    if memory(psi, devices, stage).total > room:
        raise Wrong(f"stage {stage} on {devices} devices needs "
                    f"{memory(psi, devices, stage).total / 1e9:.1f} GB of state: more than "
                    f"{room / 1e9:.0f} GB.", "Write the bytes per device of each stage as a "
                    "function of N and solve for the smallest N that fits.")
    if (stage, devices) != want:
        raise Wrong(f"stage {stage} on {devices} devices fits, but sends "
                    f"{communication(psi, devices, stage) / 1e9:.1f} GB per device; another "
                    "choice sends less.", "Compare the cheapest fitting choice of each stage.")
    expect_number(as_number(gb_sent), communication(psi, *want[::-1]) / 1e9,
                  what="the GB sent", rel=1e-3, hint="zero.communication(params, devices, stage)"
                  " counts ring bytes at 2 bytes per parameter.")
    return (f"stage {want[0]} on {want[1]} devices: "
            f"{memory(psi, want[1], want[0]).total / 1e9:.1f} GB of state, "
            f"{communication(psi, want[1], want[0]) / 1e9:.1f} GB sent per device.")
