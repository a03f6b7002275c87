"""The declarations of :mod:`tpviz.core.harness`: what a build checker grades (:class:`Build`,
:class:`Expect`), the cases it makes (:class:`Case`, :func:`cases`: each also makes a second set
of inputs of the same shapes, only when asked), and :func:`guarded`, which calls the learner's
code with the book's answers out of reach."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from tpviz.core.exercises import Wrong, call
from tpviz.core.harness_report import specs
from tpviz.core.notation import parse
from tpviz.core.unavailable import Unavailable, message, unavailable


@dataclasses.dataclass(frozen=True)
class Expect:
    """A collective the compiled program must hold: ``count`` of ``kind`` moving ``nbytes`` (V,
    the whole array gathered or reduced: :attr:`Collective.full_bytes`) along ``axes`` (mesh
    axis names; None: any), described as ``what`` in messages ("W1", "the [T, H] output")."""

    kind: str
    nbytes: int
    axes: tuple[str, ...] | None = None
    count: int = 1
    what: str = ""


@dataclasses.dataclass
class Case:
    """One mesh and one set of inputs the harness made: what the hooks receive."""

    mesh: Any
    sizes: dict
    args: tuple
    names: tuple[str, ...]
    remake: Callable[[], tuple] | None = None  # inputs of the same shapes, made when called

    @property
    def n(self) -> int:
        """Devices in the mesh."""
        return int(self.mesh.size)

    def size(self, axis: str) -> int:
        return int(self.mesh.shape[axis])

    def nbytes(self, name: str) -> int:
        """Bytes of the input called ``name`` (whole)."""
        return int(np.asarray(self.args[self.names.index(name)]).nbytes)

    def describe(self) -> str:
        shape = "×".join(map(str, self.mesh.devices.shape))
        where = f"{self.n} devices" if self.mesh.devices.ndim == 1 else f"the {shape} mesh"
        sizes = ", ".join(f"{k} = {v}" for k, v in self.sizes.items())
        return where + (f" with {sizes}" if sizes else "")


@dataclasses.dataclass(frozen=True)
class Build:
    """What a build checker grades; see the module docstring for the order of the checks."""

    what: str
    layouts: Sequence[str]
    out: Any  # a notation string, or a tuple of them for several outputs
    axes: Sequence[str]
    cases: Sequence[tuple[tuple[int, ...], dict]]
    inputs: Callable[[dict, np.random.Generator], tuple]  # sizes (and "devices"), rng -> args
    reference: Callable[..., Any]
    collectives: Callable[[Case], list[Expect]] | None = None
    extra: Callable[[Case, list], str | None] | None = None  # more about the collectives
    unavailable: Sequence[str] = ()
    per_device: bool = True
    program: Callable[[Any, Case], Callable] | None = None
    vma: bool | str = False
    manual: bool = False
    explicit: bool = False  # the mesh's axes are Explicit, and the program runs in its context
    placed: bool = False  # the inputs arrive placed as ``layouts`` (else: host arrays)
    out_names: Sequence[str] | None = None
    names: Sequence[str] | None = None  # the inputs' names (default: from ``layouts``)
    diagnose: Callable[[Case, Any, Any], str | None] | None = None
    memory: Callable[..., str | None] | None = None  # (case, memory[, program])
    traced: Callable[[Case, Callable], str | None] | None = None  # (case, trace(shape, args))
    hint: str = ""
    praise: str | Callable[[Case, list], str] = ""  # words for ✓; a callable reads the program
    rtol: float = 1e-4
    atol: float = 1e-4
    seed: int = 0

    def __post_init__(self):
        _declare(self)


# A module of tpviz declares its builds at its top level (on import or reload); a checker there
# grades only against those. A Build made anywhere else (a notebook's dataclasses.replace of
# one, lenient) and put in a declaration's place is refused (harness.grade, `declared`).
_DECLARED: dict[str, list[Build]] = {}
_MAKERS = ("tpviz.core.harness_build", "dataclasses")  # frames between a Build and its maker


def _declare(build: Build) -> None:
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") in _MAKERS:
        frame = frame.f_back
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    if module.startswith("tpviz.") and frame.f_code.co_name == "<module>":
        _DECLARED.setdefault(module, []).append(build)


def declared(build: Build, module: str) -> None:
    """Refuse ``build`` when ``module`` (a checker's) declared builds and this is none of them."""
    own = _DECLARED.get(module)
    if own is not None and not any(build is b for b in own):
        raise Wrong(f"the check's declaration of {build.what} is not the one {module} was "
                    "imported with: something in this kernel replaced it. A check grades only "
                    "against its own declarations.",
                    "Restart the kernel (Kernel → Restart) and run the notebook's cells as "
                    "they are, without changing tpviz's modules.")


def _mesh(shape, axes, explicit: bool = False):
    from jax.sharding import AxisType

    from tpviz.devices import chosen_devices, make_mesh

    n = int(np.prod(shape))
    devices = chosen_devices()
    if len(devices) < n:
        raise Wrong(f"this check needs {n} devices, and only {len(devices)} are set up.",
                    f"Run tpviz.setup_devices({max(8, n)}) first, in a new kernel.")
    types = (AxisType.Explicit,) * len(axes) if explicit else None
    return make_mesh(tuple(shape), tuple(axes), devices=devices[:n], axis_types=types)


def guarded(fn, *args, what: str = "your function", names: Sequence[str] = ()):
    """``call(fn, *args)`` (time limit, captured output, exceptions as messages) with the
    functions ``names`` out of reach: calling one is a :class:`Wrong` that names it."""
    try:
        with unavailable(names) as called:
            result = call(fn, *args, what=what)
    except Unavailable as e:
        raise Wrong(_refused(e.name)) from None
    except Wrong:
        if called:
            raise Wrong(_refused(called[0])) from None
        raise
    if called:
        raise Wrong(_refused(called[0]))
    return result


def _refused(name: str) -> str:
    return (message(name) if name != "sys.setprofile" else
            "your code switched off the checker's watch (sys.setprofile); leave it on.")


def cases(build: Build) -> list[Case]:
    """The meshes and inputs of ``build.cases``, each seeded by its position."""
    cases = []
    for k, (shape, sizes) in enumerate(build.cases):
        n = int(np.prod(shape))
        names = tuple(build.names or (parse(text).name for text in build.layouts))
        mesh = _mesh(shape, build.axes, build.explicit)

        def make(seed, sizes=sizes, n=n, mesh=mesh):
            args = tuple(build.inputs(dict(sizes, devices=n), np.random.default_rng(seed)))
            if build.placed:
                args = tuple(jax.device_put(a, jax.sharding.NamedSharding(mesh, spec))
                             for a, spec in zip(args, specs(tuple(build.layouts)), strict=True))
            return args

        cases.append(Case(mesh, dict(sizes), make(build.seed + k), names,
                          functools.partial(make, build.seed + k + FRESH)))
    return cases


FRESH = 1000  # the seed offset of the second inputs of each case
