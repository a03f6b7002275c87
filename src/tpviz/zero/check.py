"""Measure the layer-by-layer ZeRO steps of :mod:`tpviz.zero.run` and check them.

``measure(stage, layers, width)`` compiles one training step and reads XLA's memory analysis and
collectives. The figure that tracks what a device holds is

    live = argument + output - alias + temp

(:attr:`tpviz.core.compiled.Memory.live`): the arguments are the state the step receives (params,
m, v, and the batch); with the state donated, the new state is written into the old state's
buffers (``alias``), so only the loss adds to the output; ``temp`` holds everything the step
allocates while it runs — the gradients, the gathered layers, the activations. XLA's own
``peak`` figure on the CPU counts arguments and outputs but not the temporaries, so it cannot see
a gradient or a gathered layer; it is not used.

The plan (``planned_bytes``) is :func:`tpviz.zero.plan.memory` for fp32 params and gradients
and Adam's m and v (4 + 4 + 8 bytes per parameter), plus the step's transient buffers, each the
size of one layer (R H numbers):

- stage 1: one gathered layer (the all-gather of a layer's updated parameters);
- stage 2: one layer's gradient (before its reduce-scatter) and one gathered layer;
- stage 3: one gathered layer (for its forward or backward) and one layer's gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpviz.core import compiled, verify
from tpviz.core.collectives import Collectives
from tpviz.core.kinds import Devices, OneOf, Size
from tpviz.devices import chosen_devices, make_mesh
from tpviz.errors import DeviceSetupError, ZeroError
from tpviz.zero import run
from tpviz.zero.plan import STAGES, memory
from tpviz.zero.plan import collectives as plan_collectives

LAYERS = "each layer is compiled into the step"
WIDTH = "the step holds width × width weights per layer"

TOLERANCE = 0.10  # measured live bytes within 10 % of the plan (activations and batch excluded)
BUFFERS = {0: (), 1: ("one gathered layer",),
           2: ("one layer's gradient", "one gathered layer"),
           3: ("one gathered layer", "one layer's gradient")}


@dataclass(frozen=True)
class Measurement:
    """One compiled ZeRO step of an MLP, beside the plan (bytes per device)."""

    stage: int
    layers: int
    width: int
    devices: int
    memory: compiled.Memory  # XLA's memory analysis of the step
    collectives: Collectives  # read from the compiled step
    state: dict[str, float]  # the plan's params, grads, optimizer
    buffers: dict[str, int]  # the plan's transient buffers, by name
    layer_bytes: int  # one layer's parameters, padding included (R H floats)

    @property
    def peak_bytes(self) -> int:
        """Measured: arguments + outputs not written into donated buffers + temporaries."""
        return self.memory.live

    @property
    def planned_bytes(self) -> float:
        """The plan: its params + grads + optimizer state, and the transient buffers."""
        return sum(self.state.values()) + sum(self.buffers.values())

    @property
    def error(self) -> float:
        """(measured - planned) / planned."""
        return self.peak_bytes / self.planned_bytes - 1

    def planned_collectives(self) -> Collectives:
        """The plan's collectives of one layer, once per layer. At stage 3 the first layer's
        backward needs no gathered weights (no one asks for the gradient of the input), so
        the compiler drops that all-gather: 2 L - 1 gathers."""
        one = plan_collectives(self.layer_bytes // 4, self.devices, self.stage, param_bytes=4)
        out = Collectives(c for _ in range(self.layers) for c in one)
        if self.stage == 3:
            out.remove(next(c for c in out if c.kind == "all-gather"))
        return out


def _mesh(devices: int):
    found = chosen_devices()
    if len(found) < devices:
        raise DeviceSetupError(f"{devices} devices needed, {len(found)} set up; call "
                               f"tpviz.setup_devices({devices}) in a fresh kernel.")
    return make_mesh((devices,), (run.AXIS,), devices=found[:devices])


def _batch(model: run.Model, rows_per_device: int = 8, seed: int = 1):
    rng = np.random.default_rng(seed)
    shape = (model.devices * rows_per_device, model.width)
    return (rng.standard_normal(shape, dtype=np.float32),
            rng.standard_normal(shape, dtype=np.float32))


def measure(stage: OneOf(STAGES), layers: Size(16, LAYERS) = 4, width: Size(1024, WIDTH) = 256,
            devices: Devices = 8) -> Measurement:
    """Compile one step of ZeRO ``stage`` for an MLP of ``layers`` layers of ``width`` on
    ``devices`` devices; read its memory and collectives; check the collectives.

    Raises:
        ZeroError: a stage outside 0-3, or fewer than 1 layer or width.
        CheckFailed: the compiled collectives (kind, bytes) are not the plan's, layer by layer.
    """
    if not isinstance(layers, int) or layers < 1 or not isinstance(width, int) or width < 1:
        raise ZeroError(f"layers and width must be positive integers, got {layers!r}, "
                        f"{width!r}.")
    model = run.Model(layers, width, devices)
    mesh = _mesh(devices)
    state = run.start(model, mesh, stage)
    x, target = _batch(model)
    program = compiled.compile_for(run.step_fn(model, mesh, stage), *state, 1, x, target)
    plan = memory(model.padded, devices, stage, param_bytes=4, grad_bytes=4, optimizer_bytes=8)
    layer = model.layer_padded * 4
    result = Measurement(stage, layers, width, devices, compiled.memory(program),
                         compiled.collectives(program),
                         {"params": plan.params, "grads": plan.grads,
                          "optimizer": plan.optimizer},
                         dict.fromkeys(BUFFERS[stage], layer), layer)
    verify.same(sorted((c.kind, c.bytes) for c in result.collectives),
                sorted((c.kind, c.bytes) for c in result.planned_collectives()),
                f"stage {stage}: the compiled step's collectives (kind, bytes per device)")
    return result


def train(stage: OneOf(STAGES), layers: Size(16, LAYERS) = 4, width: Size(1024, WIDTH) = 64,
          devices: Devices = 8, steps: Size(1000, "each step runs on the mesh") = 3) -> float:
    """Train ``steps`` Adam steps at ``stage`` and return the parameters' largest relative
    error against the same training on one device.

    Raises:
        CheckFailed: the error exceeds 1e-5, or the padding rows moved.
    """
    model = run.Model(layers, width, devices)
    mesh = _mesh(devices)
    params, m, v = run.start(model, mesh, stage)
    x, target = _batch(model)
    program = compiled.compile_for(run.step_fn(model, mesh, stage), params, m, v, 1, x, target)
    for t in range(1, steps + 1):
        params, m, v, _ = program(params, m, v, t, x, target)
    got = [verify.host(a, np.float32) for a in params]  # gathered from every process
    verify.require(all(not a[width + 1:].any() for a in got),
                   f"stage {stage}: the padding rows of the parameters must stay zero")
    return verify.close(got, run.reference(model, x, target, steps),
                        f"stage {stage}: parameters after {steps} Adam steps", 1e-5)
