"""One harness for build checkers: a checker *declares* what it grades; the harness grades it.

A build exercise asks the learner to write parallel code: a ``shard_map`` body, a whole sharded
program, conjugate operators, a ring of ``ppermute`` calls. Its checker describes the exercise as a
:class:`Build` and calls :func:`grade` inside a :func:`~tpviz.core.exercises.checker`::

    FSDP = harness.Build(
        what="your per-device matmul",          # how messages name the learner's code
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
        unavailable=("tpviz.matmul.explicit",),  # the book's answers: calling one fails
        hint="Each device has its own rows of In but only 1/N of the rows of W1 ...",
        praise="Case 2, as FSDP runs it for every layer.")

    @checker("FSDP's matmul: case 2")
    def check_fsdp_matmul(fn):
        return harness.grade(fn, FSDP)

For each case, in order, the harness builds the mesh from ``tpviz.devices.chosen_devices()``,
makes the inputs itself (``inputs(sizes, rng)``, seeded per case; ``sizes`` also holds
``"devices"``), so a result computed in advance or for the notebook's own arrays fails, and
grades, stopping at the first mistake:

1. **runs** the answer once (compile, then run) under the time limit of
   :func:`tpviz.core.exercises.call`, with the ``unavailable`` functions out of reach
   (:mod:`tpviz.core.unavailable`: calling one fails with "this exercise asks you to write what
   `tpviz.megatron.row_parallel` does"); an exception, an endless loop or a stub is a message;
2. **values** against ``reference(*inputs)`` (or ``reference(*inputs, case=case)``), leaf by
   leaf (named by ``out_names``) and on every device's copy; a ``diagnose(case, got, want)`` hook
   may first name a known mistake ("8 times too large: summed, not averaged"). The compiled
   program then runs again on inputs of the same shapes made after it was traced (a result read
   from the checker's arrays while tracing and baked in is right on the first ones only);
3. **manual** (``manual=True``): the program must be a ``jax.shard_map``, with nothing computed
   outside it (a program left to the compiler, ``jax.jit(..., out_shardings=...)``, fails, and
   so does a ``shard_map`` whose inputs or result the compiler reshapes, sums or reshards);
4. **placement** (``per_device=False``): the input shardings the compiled program holds and the
   bytes each device holds, operand by operand ("W1 is held whole on each device (2,560 bytes
   per device), but the exercise holds it as W1[D, F_X]: 320 bytes"); the result's sharding;
5. **collectives**: exactly the ``collectives(case)`` list of :class:`Expect` (kind, count,
   bytes ``V`` = :attr:`Collective.full_bytes`, mesh axes), read from the compiled program with
   loops counted (:mod:`tpviz.core.executed`); then an ``extra(case, found)`` hook for what a
   list cannot say (ring neighbours, directions, "at most two numbers per row");
6. **memory** (optional): ``memory(case, compiled.memory(program))`` for exercises about memory
   (activations, a KV cache): return a message to fail; a hook of three parameters also gets
   the compiled program (to read the shapes of the arrays it holds).
7. **traced** (optional): ``traced(case, trace)`` for what one compiled program cannot say;
   ``trace(mesh_shape, args)`` traces the learner's program on another mesh (``args`` may be
   ``jax.ShapeDtypeStruct``) and returns its jaxpr, e.g. to read with
   :mod:`tpviz.core.liveness` that the bytes held do not grow with the devices (9.4's ring).

A hook returns None when all is well, or the mistake in words. A mistake on a later case after
earlier ones passed says so ("right on 8 devices with n = 64, but on 4 devices with n = 26"):
code right on one size only. The ✓ message says what the compiled program of the first case
moved (never what a plan says), and how many cases passed; ``praise`` adds words before it (a
callable ``praise(case, found)`` may price what was found).

How the answer becomes a program:

- ``per_device=True`` (default): the answer is the function one device runs; the harness wraps
  it in ``jax.shard_map(answer, mesh, in_specs=layouts, out_specs=out, check_vma=vma)``.
  ``vma="either"`` accepts an answer right with ``check_vma=True`` (JAX's default) or ``False``
  and reports the attempt that got further. ``layouts`` entries may be specs (``P(...)``, a
  pytree argument such as a dict of parameters); name the inputs with ``names`` then.
- ``per_device=False``: the answer is a whole program on the exercise's mesh (the first devices
  of ``chosen_devices()``, as ``tpviz.make_mesh`` makes them), called on global host arrays, or
  on arrays already placed as ``layouts`` with ``placed=True``; ``explicit=True`` makes the
  mesh's axes Explicit and runs the program with it as the current mesh. ``out=None`` leaves
  the result's layout unchecked (a scalar).
- ``program=lambda answer, case: fn``: anything else: an answer with extra arguments (1.5's
  ``fn(x, axis, k)``), operators plugged into the checker's own model (4.2's ``(f, g)``: pass a
  tuple as the answer), a library program with the learner's step in it (6.3). The hook and the
  program it returns run inside the watch, so ``unavailable`` must not name a function the
  checker's own program calls.

A checker grades only against the builds its module declared at its top level (on import or
reload): a ``Build`` made elsewhere and put in a declaration's place (a notebook replacing
``tpviz.context.builds.RING`` with a lenient ``dataclasses.replace`` of it) is refused before the
learner's code runs. Declare every ``Build`` at module level.

Builds without a mesh (a pricing function, a schedule's construction) call the learner's code
through :func:`guarded`, which applies the same time limit and keeps the same functions out of
reach. ✗ messages say what is wrong and where to look (``hint``); they never show the code.

For a new chapter: declare ``unavailable`` as the dotted names of the topic functions that
solve the exercise (and the helpers they are built from), choose at least two sizes and, where
the exercise has a mesh, two mesh sizes or shapes, and write the exact collectives from the
exercise's arithmetic (the plan may give them, as ``mesh2d.plan(...).collectives()`` does for
6.6). Then write at least five wrong programs as a learner would (a library shortcut, a
hard-coded or one-size answer, an operand held whole, an extra or wrong collective, right on one
mesh size only) and test that each is rejected with words that name its mistake.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import sys

import jax

from tpviz import compat
from tpviz.core import compiled, verify
from tpviz.core.exercises import NotAttempted, Wrong, is_stub
from tpviz.core.harness_build import Build, Case, Expect, _mesh, cases, declared, guarded
from tpviz.core.harness_report import compare, moved, placement, specs, summary, values

__all__ = ["Build", "Case", "Expect", "grade", "guarded"]


def _program(answer, build: Build, case: Case, vma: bool):
    """The learner's answer as a program on ``case.mesh``."""
    if build.program is not None:
        return build.program(answer, case)
    if build.per_device:
        return jax.shard_map(answer, mesh=case.mesh, in_specs=specs(build.layouts),
                             out_specs=specs(build.out), check_vma=vma)
    return answer


def _run(answer, build: Build, case: Case, vma: bool):
    """Compile the program once and run it; returns (out, program, lowered text if manual)."""
    fn = _program(answer, build, case, vma)

    def compile_and_run():
        with compat.mesh_context(case.mesh) if build.explicit else contextlib.nullcontext():
            jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
            outside = _outside(jax.make_jaxpr(jitted)(*case.args)) if build.manual else None
            program = compiled.compile_for(jitted, *case.args)
            return jax.block_until_ready(program(*case.args)), program, outside

    return guarded(compile_and_run, what=build.what, names=build.unavailable)


def _outside(closed) -> list[str] | None:
    """The operations a program runs outside every ``jax.shard_map`` (calls such as ``jax.jit``
    are looked into), or None when it runs no ``shard_map`` at all."""
    found, outside = False, []

    def walk(jaxpr):
        nonlocal found
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "shard_map":
                found = True
                continue
            inner = [getattr(v, "jaxpr", v) for v in eqn.params.values()
                     if hasattr(getattr(v, "jaxpr", v), "eqns")]
            for sub in inner:
                walk(sub)
            if not inner:
                outside.append(eqn.primitive.name)

    walk(closed.jaxpr)
    return outside if found else None


def _manual(build: Build, outside: list[str] | None) -> None:
    """A whole program must be a ``shard_map``: no communication or work left to the compiler."""
    if not build.manual:
        return
    if outside is None:
        raise Wrong(f"{build.what} has no jax.shard_map: the compiler chose its communication, "
                    "and this exercise asks you to write the per-device program yourself.",
                    build.hint)
    if outside:
        ops = ", ".join(dict.fromkeys(outside))
        raise Wrong(f"{build.what} computes outside its jax.shard_map ({ops}): the compiler "
                    "decides how that part runs and what it sends. Put all of the work, and "
                    "all of the communication, in the per-device function.", build.hint)


def _reference(build: Build, case: Case):
    takes_case = "case" in inspect.signature(build.reference).parameters
    return build.reference(*case.args, **({"case": case} if takes_case else {}))


def _again(build: Build, case: Case, program) -> None:
    """The compiled program on inputs made after it was traced: a result baked in while tracing
    (read from the checker's arrays) is right on the first inputs only."""
    if case.remake is None:
        return
    fresh = dataclasses.replace(case, args=case.remake())
    out = guarded(lambda: jax.block_until_ready(program(*fresh.args)), what=build.what)
    try:
        values(build, fresh, out, _reference(build, fresh))
    except Wrong as w:
        raise Wrong("right on the check's first inputs, but on other inputs of the same shapes "
                    f"(made after your program was traced): {w.message}", w.hint) from None


def _grade_case(answer, build: Build, case: Case, vma: bool, state: dict) -> list:
    out, program, outside = _run(answer, build, case, vma)
    values(build, case, out, _reference(build, case))  # (computed after the learner's code ran)
    _again(build, case, program)
    state["values"] = True  # how far this case got (for choosing a message)
    _manual(build, outside)
    if not build.per_device:
        mistake = placement(program, out, case, build.layouts, build.out)
        if mistake:
            raise Wrong(mistake, build.hint)
    found = moved(program, case.mesh)
    if build.collectives is not None or build.extra is not None:
        mistake = compare(found, build.collectives(case)) if build.collectives else None
        mistake = mistake or (build.extra(case, found) if build.extra else None)
        if mistake:
            raise Wrong(f"right values, but the compiled program holds {summary(found)}: "
                        f"{mistake}.", build.hint)
    if build.memory is not None:
        more = (program,) if len(inspect.signature(build.memory).parameters) > 2 else ()
        if mistake := build.memory(case, compiled.memory(program), *more):
            raise Wrong(mistake, build.hint)
    if build.traced is not None:
        def trace(shape, args):  # the learner's program on another mesh, traced, not run
            other = dataclasses.replace(case, mesh=_mesh(shape, build.axes, build.explicit),
                                        args=tuple(args))
            return jax.make_jaxpr(_program(answer, build, other, vma))(*other.args)

        if mistake := guarded(build.traced, case, trace, what=build.what,
                              names=build.unavailable):
            raise Wrong(mistake, build.hint)
    return found


def _attempt(answer, build: Build, vma: bool) -> str:
    made, passed, first = cases(build), [], None
    for case in made:
        quiet = contextlib.redirect_stdout(io.StringIO()) if passed else contextlib.nullcontext()
        state = {"values": False}
        try:
            with quiet:  # the learner's printing is shown once, for the first case
                found = _grade_case(answer, build, case, vma, state)
        except Wrong as w:
            if passed:
                wrong = Wrong(f"right on {passed[0].describe()}, but on {case.describe()}: "
                              f"{w.message}", w.hint or "Does your code assume a size or a "
                              "number of devices? Read them from the arrays and the mesh axes.")
            else:
                wrong = Wrong(f"on {case.describe()}: {w.message}", w.hint)
            wrong.progress = (len(passed), state["values"], getattr(w, "diagnosed", False))
            raise wrong from None
        first = found if not passed else first
        passed.append(case)
    verify.require(bool(made), "a Build needs at least one case")
    shapes = sorted({tuple(c.mesh.devices.shape) for c in made})
    meshes = (f"{' and '.join(str(s[0]) for s in shapes)} devices" if len(shapes[0]) == 1 else
              f"the {' and '.join('×'.join(map(str, s)) for s in shapes)} mesh"
              + ("es" if len(shapes) > 1 else ""))
    checked = (f"right on {len(made)} cases ({meshes}, "
               f"{len({tuple(c.sizes.items()) for c in made})} sets of sizes)")
    what = summary(first) if first else "nothing between devices"
    praise = build.praise(made[0], first) if callable(build.praise) else build.praise
    return (f"{praise + ' ' if praise else ''}The compiled program moved {what} on "
            f"{made[0].describe()}; {checked}.")


def grade(answer, build: Build) -> str:
    """Grade ``answer`` against ``build``; the ✓ text, or :class:`Wrong` / ``NotAttempted``."""
    if is_stub(answer) or (isinstance(answer, tuple) and any(is_stub(a) for a in answer)):
        raise NotAttempted
    declared(build, sys._getframe(1).f_globals.get("__name__", ""))
    if build.vma != "either":
        return _attempt(answer, build, bool(build.vma))
    try:  # check_vma=True (JAX's default), then False: the message of the one that got further
        return _attempt(answer, build, True)
    except Wrong as typed:
        try:
            return _attempt(answer, build, False)
        except Wrong as untyped:
            further = getattr(untyped, "progress", ()) > getattr(typed, "progress", ())
            raise (untyped if further else typed) from None
