"""One harness for build checkers: a checker *declares* what it grades; the harness grades it.

A build exercise asks the learner to write parallel code: a ``shard_map`` body, a whole sharded
program, conjugate operators, a schedule. Its checker describes the exercise as a :class:`Build`
and calls :func:`grade` inside a :func:`~tpviz.core.exercises.checker`::

    FSDP = harness.Build(
        what="your per-device matmul",
        layouts=("In[B_X, D]", "W1[D_X, F]"),   # the inputs, in call order, as held on the mesh
        out="Out[B_X, F]",                      # how the result is held
        axes=("X",),                            # the mesh axes' names
        cases=(((8,), {"B": 16, "D": 32, "F": 24}),   # (mesh shape, sizes): >= 2 sizes and,
               ((8,), {"B": 24, "D": 16, "F": 40}),   # where the exercise allows it,
               ((4,), {"B": 8, "D": 32, "F": 24})),   # >= 2 mesh sizes
        inputs=lambda s, rng: (rng.standard_normal((s["B"], s["D"]), dtype=np.float32),
                               rng.standard_normal((s["D"], s["F"]), dtype=np.float32)),
        reference=lambda x, w: x @ w,           # one device, NumPy or JAX
        collectives=lambda case: [harness.Expect("all-gather", case.nbytes("W1"), ("X",),
                                                 what="W1")],
        unavailable=("tpviz.matmul.run.explicit",),  # the book's answers: calling one fails
        hint="Each device has its own rows of In but only 1/N of the rows of W1 ...",
        praise="The case 2 that FSDP runs for every layer.")

    @checker("FSDP's matmul: case 2")
    def check_fsdp_matmul(fn):
        return harness.grade(fn, FSDP)

For each case, in order, the harness builds the mesh from ``tpviz.devices.chosen_devices()``,
makes the inputs itself (seeded, so a result computed in advance or for the learner's own
arrays fails), and then grades, stopping at the first mistake:

1. **runs** the answer under the time limit of :func:`tpviz.core.exercises.call` with the
   ``unavailable`` functions out of reach (:mod:`tpviz.core.unavailable`): compile once, run
   once; a learner's exception, an endless loop or a stub becomes a message;
2. **manual** (``manual=True``): the program must contain a ``jax.shard_map`` (a program left to
   the compiler, e.g. ``jax.jit(..., out_shardings=...)``, fails);
3. **values** against ``reference`` (each output leaf by name, ``out_names``); a ``diagnose``
   hook may name a known mistake first (e.g. "N times too large");
4. **placement** (whole programs, ``per_device=False``): the input shardings the compiled
   program holds and the bytes each device holds, operand by operand; the result's sharding;
5. **collectives**: exactly the :class:`Expect` list (kind, count, bytes ``V``, mesh axes), read
   from the compiled program with loops counted (:mod:`tpviz.core.executed`);
6. **memory** (optional hook): :func:`tpviz.core.compiled.memory` of the compiled program.

A mistake on a later case after earlier cases passed says so ("right on 8 devices at B = 16 …,
but on 4 devices …"): code right on one size only. The ✓ message is built from the compiled
program of the first case (what it moved), never from a plan.

How the answer becomes a program (``per_device`` and ``program``):

- ``per_device=True`` (default): the answer is the function one device runs; the harness wraps
  it in ``jax.shard_map(answer, mesh, in_specs=layouts, out_specs=out, check_vma=vma)``.
  ``vma="either"`` accepts an answer right with ``check_vma=True`` (JAX's default) or ``False``.
- ``per_device=False``: the answer is a whole program on the exercise's mesh (the first devices
  of ``chosen_devices()``, as ``tpviz.make_mesh`` makes it); it is called on global arrays.
- ``program=lambda answer, case: fn``: anything else (an answer with extra arguments, operators
  plugged into the checker's own model, a library program with the learner's step in it).

Other builds (no mesh: a pricing function, a schedule) use :func:`guarded` to call the answer
with the book's answers out of reach. ✗ messages say what is wrong and where to look (the
``hint``); they never show the expected code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from tpviz import compat
from tpviz.core import compiled, verify
from tpviz.core.exercises import NotAttempted, Wrong, call, is_stub
from tpviz.core.harness_report import compare, moved, placement, specs, summary, values
from tpviz.core.notation import parse
from tpviz.core.unavailable import Unavailable, message, unavailable

__all__ = ["Build", "Case", "Expect", "grade", "guarded"]


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
    inputs: Callable[[dict, np.random.Generator], tuple]
    reference: Callable[..., Any]
    collectives: Callable[[Case], list[Expect]] | None = None
    unavailable: Sequence[str] = ()
    per_device: bool = True
    program: Callable[[Any, Case], Callable] | None = None
    vma: bool | str = False
    manual: bool = False
    explicit: bool = False  # the mesh's axes are Explicit, and the program runs in its context
    placed: bool = False  # the inputs arrive placed as ``layouts`` (else: host arrays)
    out_names: Sequence[str] | None = None
    diagnose: Callable[[Case, Any, Any], str | None] | None = None
    memory: Callable[[Case, Any], str | None] | None = None
    hint: str = ""
    praise: str = ""
    rtol: float = 1e-4
    atol: float = 1e-4
    seed: int = 0


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
        raise Wrong(message(e.name)) from None
    except Wrong:
        if called:
            raise Wrong(message(called[0])) from None
        raise
    if called:
        raise Wrong(message(called[0]) if called[0] != "sys.setprofile" else
                    "your code switched off the checker's watch (sys.setprofile); leave it on.")
    return result


def _run(answer, build: Build, case: Case, vma: bool):
    """Compile the program once and run it; returns (out, program, lowered text if manual)."""
    if build.program is not None:
        fn = build.program(answer, case)
    elif build.per_device:
        fn = jax.shard_map(answer, mesh=case.mesh, in_specs=specs(build.layouts),
                           out_specs=specs(build.out), check_vma=vma)
    else:
        fn = answer

    def compile_and_run():
        with compat.mesh_context(case.mesh) if build.explicit else contextlib.nullcontext():
            jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
            text = jitted.lower(*case.args).as_text() if build.manual else ""
            program = compiled.compile_for(jitted, *case.args)  # the trace above is reused
            return jax.block_until_ready(program(*case.args)), program, text

    return guarded(compile_and_run, what=build.what, names=build.unavailable)


def _manual(build: Build, text: str) -> None:
    if build.manual and not any(m in text for m in ("manual_computation", "SPMDFullToShard")):
        raise Wrong(f"{build.what} has no jax.shard_map: the compiler chose its communication, "
                    "and this exercise asks you to write the per-device program yourself.",
                    build.hint)


def _grade_case(answer, build: Build, case: Case, vma: bool) -> list:
    want = build.reference(*case.args)
    out, program, text = _run(answer, build, case, vma)
    values(build, case, out, want)
    _manual(build, text)
    if not build.per_device:
        mistake = placement(program, out, case, build.layouts, build.out)
        if mistake:
            raise Wrong(mistake, build.hint)
    found = moved(program, case.mesh)
    if build.collectives is not None:
        mistake = compare(found, build.collectives(case))
        if mistake:
            raise Wrong(f"right values, but the compiled program holds {summary(found)}: "
                        f"{mistake}.", build.hint)
    if build.memory is not None and (mistake := build.memory(case, compiled.memory(program))):
        raise Wrong(mistake, build.hint)
    return found


def _cases(build: Build) -> list[Case]:
    cases = []
    for k, (shape, sizes) in enumerate(build.cases):
        rng = np.random.default_rng(build.seed + k)
        args = tuple(build.inputs(dict(sizes), rng))
        names = tuple(parse(text).name for text in build.layouts)
        mesh = _mesh(shape, build.axes, build.explicit)
        if build.placed:
            args = tuple(jax.device_put(a, jax.sharding.NamedSharding(mesh, spec))
                         for a, spec in zip(args, specs(tuple(build.layouts)), strict=True))
        cases.append(Case(mesh, dict(sizes), args, names))
    return cases


def _attempt(answer, build: Build, vma: bool) -> str:
    cases, passed, first = _cases(build), [], None
    for case in cases:
        quiet = contextlib.redirect_stdout(io.StringIO()) if passed else contextlib.nullcontext()
        try:
            with quiet:  # the learner's printing is shown once, for the first case
                found = _grade_case(answer, build, case, vma)
        except Wrong as w:
            if passed:
                raise Wrong(f"right on {passed[0].describe()}, but on {case.describe()}: "
                            f"{w.message}", w.hint or "Does your code assume a size or a number "
                            "of devices? Read them from the arrays and the mesh axes.") from None
            raise Wrong(f"on {case.describe()}: {w.message}", w.hint) from None
        first = found if not passed else first
        passed.append(case)
    verify.require(bool(cases), "a Build needs at least one case")
    shapes = sorted({tuple(c.mesh.devices.shape) for c in cases})
    meshes = (f"{' and '.join(str(s[0]) for s in shapes)} devices" if len(shapes[0]) == 1 else
              f"the {' and '.join('×'.join(map(str, s)) for s in shapes)} mesh"
              + ("es" if len(shapes) > 1 else ""))
    checked = (f"right on {len(cases)} cases ({meshes}, "
               f"{len({tuple(c.sizes.items()) for c in cases})} sets of sizes)")
    what = summary(first) if first else "nothing between devices"
    return (f"{build.praise + ' ' if build.praise else ''}The compiled program moved {what} "
            f"on {cases[0].describe()}; {checked}.")


def grade(answer, build: Build) -> str:
    """Grade ``answer`` against ``build``; the ✓ text, or :class:`Wrong` / ``NotAttempted``."""
    if is_stub(answer) or (isinstance(answer, tuple) and any(is_stub(a) for a in answer)):
        raise NotAttempted
    if build.vma != "either":
        return _attempt(answer, build, bool(build.vma))
    try:
        return _attempt(answer, build, True)
    except Wrong as typed:
        try:
            return _attempt(answer, build, False)
        except Wrong:
            raise typed from None
