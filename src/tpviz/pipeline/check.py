"""Check the SPMD pipeline against one device, and read its compiled sends and memory.

``spmd_check(name, stages, microbatches)`` compiles :func:`tpviz.pipeline.spmd.program` once,
runs it, and compares

- the loss and gradients with the single-device model (:func:`tpviz.pipeline.run.loss_fn`);
- the compiled program's collective-permutes (read by :mod:`tpviz.core.compiled`) with the
  schedule's point-to-point sends: one send per F of a stage that is not the last, one per B of a
  stage that is not the first, each one microbatch's activation (rows x H floats);
- and it reads XLA's memory analysis of the program (bytes per device).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import jax
import numpy as np

from tpviz.core import compiled, verify
from tpviz.core.collectives import Collective, Collectives
from tpviz.core.kinds import COMPILED, HELD, Of, Seed, Size
from tpviz.devices import chosen_devices, make_mesh
from tpviz.errors import DeviceSetupError
from tpviz.pipeline import run, spmd
from tpviz.pipeline.plan import Schedule, schedule
from tpviz.pipeline.simulate import simulate


@dataclass(frozen=True)
class SpmdCheck:
    """What one SPMD pipeline step gave, beside one device and beside the plan."""

    name: str
    stages: int
    microbatches: int
    loss: float
    loss_error: float  # relative, against one device
    grad_error: float  # largest relative error of any stage's dW or db
    collectives: Collectives  # read from the compiled program
    sends: Collectives  # the schedule's point-to-point sends, one Collective per (src, dst)
    memory: compiled.Memory  # XLA's memory analysis, bytes per device
    ticks: int  # lock-step ticks of the unrolled program
    stash_slots: int  # K: saved microbatches each device has room for
    microbatch_bytes: int  # one microbatch's saved activations on one stage (h and y)
    simulated_peak: int  # the simulator's most microbatches held by any device
    stash_copies: int  # copy ops of the whole stash in the optimized HLO

    @property
    def peak_bytes(self) -> int:
        """Measured memory per device of the compiled program: arguments + outputs + the
        temporaries XLA allocates (:attr:`tpviz.core.compiled.Memory.live`; nothing is donated).
        XLA's own ``peak`` figure on the CPU leaves the temporaries out, so it is not used."""
        return self.memory.live

    @property
    def planned_activation_bytes(self) -> int:
        """The simulator's peak activations x one microbatch's activation bytes."""
        return self.simulated_peak * self.microbatch_bytes

    def transfers(self, found: Collectives | None = None) -> tuple[int, int]:
        """(point-to-point transfers, bytes moved in all): one per (source, target) pair."""
        found = self.collectives if found is None else found
        permutes = [c for c in found if c.kind == "collective-permute"]
        return (sum(len(c.groups) for c in permutes),
                sum(len(c.groups) * c.bytes for c in permutes))


def schedule_sends(sched, rows: int, width: int, itemsize: int = 4) -> Collectives:
    """The schedule's point-to-point sends, from its ops alone: the activation of every F on a
    stage but the last goes forward, the input gradient of every B on a stage but the first
    goes back; each is one microbatch of rows x width numbers."""
    p, size = sched.stages, rows * width * itemsize
    out = Collectives()
    for d, ops in enumerate(sched.ops):
        for kind, mb, _ in ops:
            if kind == "F" and d < p - 1:
                out.append(Collective("collective-permute", size, 1, "float32", (rows, width),
                                      groups=((d, d + 1),), what=f"activation of {mb}"))
            elif kind == "B" and d > 0:
                out.append(Collective("collective-permute", size, 1, "float32", (rows, width),
                                      groups=((d, d - 1),), what=f"gradient of {mb}"))
    return out


def _compile(step, *args):
    """Compile with XLA's backend optimisation off: the unrolled program has hundreds of small
    kernels, and LLVM's passes would double the compile time (buffers and collectives are
    decided before them, so the memory analysis and the collectives are the same)."""
    lowered = step.lower(*args)
    try:
        program = lowered.compile(compiler_options={"xla_backend_optimization_level": 0})
    except Exception:  # a backend without the option
        program = lowered.compile()
    return compiled.placing(program)  # with several processes: takes NumPy arguments too


def _copies(hlo: str, shape: tuple[int, ...]) -> int:
    """How many ``copy`` instructions of an array of ``shape`` the optimized HLO holds."""
    dims = ",".join(map(str, shape))
    return len(re.findall(rf"= f32\[{dims}\]\{{[\d,]*\}} copy\(", hlo))


def spmd_check(name: Of(str, Schedule), stages: Size(64, COMPILED) = 4,
               microbatches: Size(256, COMPILED) = 8, *, width: Size(1024, HELD) = 16,
               rows: Size(1024, HELD) = 32, slots: Size(256, HELD) | None = None,
               seed: Seed = 0) -> SpmdCheck:
    """Run one training step (loss and gradients) of a ``stages``-layer MLP of ``width`` as one
    SPMD program under schedule ``name`` (or a :class:`Schedule`, whose sizes then count;
    microbatches of ``rows`` rows), and check it.
    ``slots`` enlarges the activation stash beyond what the schedule needs (see
    :func:`tpviz.pipeline.spmd.program`).

    Raises:
        CheckFailed: the loss or gradients differ from one device's, or the compiled
            permutes differ from the schedule's sends (count or bytes).
        ScheduleError: a schedule the SPMD program does not run (interleaved, zb-h1).
        DeviceSetupError: fewer devices than stages.
    """
    sched = name if isinstance(name, Schedule) else schedule(name, stages, microbatches)
    name, stages, microbatches = sched.name, sched.stages, sched.microbatches
    devices = chosen_devices()
    if len(devices) < stages:
        raise DeviceSetupError(f"{stages} stages need {stages} devices, only {len(devices)}; "
                               f"call tpviz.setup_devices({stages}) in a fresh kernel.")
    mesh = make_mesh((stages,), (spmd.AXIS,), devices=devices[:stages])
    params = run.init([width] * (stages + 1), seed=seed)
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((microbatches * rows, width), dtype=np.float32)
    target = rng.standard_normal((microbatches * rows, width), dtype=np.float32)
    w = np.stack([wi for wi, _ in params])
    b = np.stack([bi for _, bi in params])
    xs = x.reshape(microbatches, rows, width)
    ts = target.reshape(microbatches, rows, width)
    step = spmd.program(sched, mesh, slots)
    prog = _compile(step, w, b, xs, ts)
    loss, dw, db = (verify.host(a, np.float32) for a in prog(w, b, xs, ts))  # per stage, whole
    want_loss, want = jax.value_and_grad(run.loss_fn)(params, x, target)
    loss_error = verify.close(float(loss[-1]), float(want_loss), f"{name}: the loss", 1e-5)
    grad_error = verify.close([(dw[s], db[s]) for s in range(stages)], want,
                              f"{name}: the gradients", 1e-5)
    found = compiled.collectives(prog)
    sends = schedule_sends(sched, rows, width)
    tk = spmd.ticks(sched)
    result = SpmdCheck(name, stages, microbatches, float(loss[-1]), loss_error, grad_error, found,
                       sends, compiled.memory(prog), tk.count, slots or tk.slots,
                       2 * rows * width * 4, max(simulate(sched).peak_activations),
                       _copies(prog.as_text(), (slots or tk.slots, 2, rows, width)))
    verify.same(sorted(found.kinds()), ["collective-permute"] * bool(len(found)),
                f"{name}: kinds of the compiled collectives")
    verify.same(result.transfers(), (len(sends), int(sends.sent_bytes())),
                f"{name}: compiled permutes as (transfers, bytes)")
    return result
