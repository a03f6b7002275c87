"""Checkers for the ZeRO chapter."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from tpviz.core import harness
from tpviz.core.exercises import (
    Wrong,
    as_integer,
    as_number,
    checker,
    expect_bytes,
    expect_number,
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


# the library's ZeRO step (its nested gather and scatter solve 5.3 and 5.5) and the book's
# reduce-scatter function of chapter 6
STEP = ("tpviz.zero.run.step_fn", "tpviz.zero.run.start", "tpviz.zero.check.train",
        "tpviz.zero.measure", "tpviz.mesh2d.run.reduce_scatter")


def _per_device_grads(outs: int):
    """The answer run per device, argument ``outs`` being its own row of the [N, n] gradients
    (its whole gradient); the arguments before it are whole, those after it split."""
    def program(answer, case):
        def body(*args):
            args = list(args)
            args[outs] = args[outs][0]  # this device's whole gradient, f32[n]
            return answer(*args)

        specs = (P(),) * outs + (P("data"),) + (P("data"),) * (len(case.args) - outs - 1)
        out = P("data") if outs == 0 else (P(), P("data"), P("data"))
        return jax.shard_map(body, mesh=case.mesh, in_specs=specs, out_specs=out,
                             check_vma=False)

    return program


def _padded_mean(grads, case):
    k = case.n
    mean = np.asarray(grads, np.float64).mean(axis=0)
    return np.pad(mean, (0, -mean.shape[0] % k)).astype(np.float32)


def _sum_not_mean(case, got, want) -> str | None:
    if np.shape(got) == np.shape(want) and np.allclose(got, case.n * np.asarray(want),
                                                       rtol=1e-4, atol=1e-5):
        return "that is the sum over the devices, not the mean."
    return None


SCATTER = harness.Build(
    what="your function", layouts=("G[N_{data}, n]",), out="g[n_{data}]", axes=("data",),
    program=_per_device_grads(0),
    inputs=lambda s, rng: (rng.standard_normal((s["devices"], s["n"]), dtype=np.float32),),
    reference=_padded_mean, diagnose=_sum_not_mean,
    cases=(((8,), {"n": 64}), ((8,), {"n": 61}), ((4,), {"n": 26})),
    collectives=lambda case: [harness.Expect(
        "reduce-scatter", 4 * case.n * -(-case.sizes["n"] // case.n), ("data",),
        what="the padded gradient")],
    unavailable=STEP,
    hint="Which collective both sums over 'data' and leaves each device its 1/N (chapter 1), "
         "and what length must its input have? Then make the sum a mean, for any N.",
    praise="One reduce-scatter: (N − 1)/N of the padded gradient's bytes, half an all-reduce's.")


@checker("The stage-2 gradient reduce-scatter")
def check_grad_reduce_scatter(fn) -> str:
    """``fn(g)`` per device inside shard_map over "data": from this device's whole gradient
    ``f32[n]`` (n not always a multiple of N), return its slice ``f32[ceil(n/N)]`` of the mean
    gradient over the devices, padded with zeros at the end to a multiple of N; one
    reduce-scatter, on 8 and 4 devices at several n."""
    return harness.grade(fn, SCATTER)


ZERO1_T = 3  # the Adam step the ZeRO-1 check runs


def _zero1_inputs(s: dict, rng) -> tuple:
    n, k = s["n"], s["devices"]
    return (rng.standard_normal(n, dtype=np.float32),
            rng.standard_normal((k, n), dtype=np.float32),  # row d: device d's gradient
            (rng.standard_normal(n) / 10).astype(np.float32),
            (rng.random(n) / 10).astype(np.float32))


def _zero1_reference(params, grads, m, v):
    from tpviz.zero.run import adam

    return tuple(np.asarray(a) for a in adam(params, np.asarray(grads).mean(0), m, v, ZERO1_T))


ZERO1 = harness.Build(
    what="your optimizer step", names=("params", "grads", "m", "v"),
    layouts=("p[n]", "G[N_{data}, n]", "m[n_{data}]", "v[n_{data}]"), out=None,
    axes=("data",), program=_per_device_grads(1), inputs=_zero1_inputs,
    reference=_zero1_reference, out_names=("the new parameters", "the new m", "the new v"),
    cases=(((8,), {"n": 64}), ((8,), {"n": 40}), ((4,), {"n": 24})),
    collectives=lambda case: [
        harness.Expect("reduce-scatter", case.nbytes("params"), ("data",), what="the gradient"),
        harness.Expect("all-gather", case.nbytes("params"), ("data",), what="the parameters")],
    unavailable=STEP,
    hint="Each device updates only the slice of the parameters whose Adam state it holds, with "
         "the mean gradient of that slice; then every device needs all the slices.",
    praise="Data parallelism's bytes, with 1/N of Adam's state and of its work on each device.",
    rtol=1e-4, atol=1e-6)


@checker("A ZeRO-1 optimizer step")
def check_zero1_step(fn) -> str:
    """``fn(params, grad, m, v)`` per device along "data": params f32[n] whole on every device,
    grad this device's own f32[n] gradient, m and v its 1/N of Adam's moments (f32[n/N]);
    returns the updated (params whole, m, v) after Adam step t = 3 on the mean gradient. On 8
    and 4 devices at several n; the compiled step: one reduce-scatter of the gradient and one
    all-gather of the parameters."""
    return harness.grade(fn, ZERO1)


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


ZERO_DESIGN = {"params": 20e9, "memory": 80e9, "activations": 20e9, "devices": 16,
               "sent": 105e9}


@checker("Design: a ZeRO stage and a device count")
def check_zero_design(stage, devices, gb_sent) -> str:
    """20B parameters, mixed-precision Adam, 80 GB devices with 20 GB kept for activations, up
    to 16 devices, at most 105 GB sent per device per step: a stage and a device count whose
    state fits within that budget (several do), and the GB it sends."""
    stage, devices = as_integer(stage, "the stage"), as_integer(devices, "the devices")
    psi, room = ZERO_DESIGN["params"], ZERO_DESIGN["memory"] - ZERO_DESIGN["activations"]
    if stage not in range(4) or devices not in range(1, ZERO_DESIGN["devices"] + 1):
        raise Wrong("the stage is 0–3 and the devices 1–16.")
    held, sent = memory(psi, devices, stage).total, communication(psi, devices, stage)
    if held > room:
        raise Wrong(f"stage {stage} on {devices} devices needs {held / 1e9:.1f} GB of state: "
                    f"more than {room / 1e9:.0f} GB.", "Write the bytes per device of each "
                    "stage as a function of N and solve for the smallest N that fits.")
    if sent > ZERO_DESIGN["sent"]:
        raise Wrong(f"stage {stage} on {devices} devices fits, but sends {sent / 1e9:.1f} GB per "
                    "device per step: over the 105 GB budget.",
                    "Which stages send less, and how many devices does each need to fit?")
    expect_number(as_number(gb_sent), sent / 1e9, what="the GB sent", rel=1e-3,
                  hint="zero.communication(params, devices, stage) counts ring bytes at 2 bytes "
                  "per parameter.")
    return (f"stage {stage} on {devices} devices: {held / 1e9:.1f} GB of state, "
            f"{sent / 1e9:.1f} GB sent per device. Stage 3 fits on fewest devices and sends "
            "1.5× what stage 2 sends; stage 2 needs more than twice the devices.")
