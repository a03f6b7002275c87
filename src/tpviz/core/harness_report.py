"""What :mod:`tpviz.core.harness` reads from a compiled program, in words: the collectives it
runs (loops counted, each with its mesh axes), how they differ from what an exercise needs, and
where its inputs and result are held."""

from __future__ import annotations

from collections import Counter

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from tpviz.core import compiled
from tpviz.core.executed import UnknownCount, executed
from tpviz.core.exercises import Wrong, expect_array
from tpviz.core.notation import parse


def moved(program, mesh) -> list[tuple]:
    """``(collective, mesh axes)`` for every collective that moves data, once per run."""
    try:
        found = executed(program)
    except UnknownCount as e:
        raise Wrong(f"{e}", "Write loops with a fixed number of steps (a Python range, or "
                    "jax.lax.fori_loop with bounds known when it compiles).") from None
    return [(c, compiled.mesh_axes(c, mesh)) for c in found if c.moves_data]


def _along(axes) -> str:
    return f" along {'×'.join(repr(a) for a in axes)}" if axes else ""


def _article(kind: str) -> str:
    return "an" if kind[0] in "a" else "a"


def summary(found) -> str:
    """E.g. "1 all-gather along 'X' of 3,072 bytes and 7 collective-permutes along 'X' of 32
    bytes each" (bytes: V, the array gathered or reduced, per device)."""
    if not found:
        return "no collectives"
    groups = Counter((c.kind, axes, c.full_bytes) for c, axes in found)
    parts = []
    for (kind, axes, nbytes), n in groups.items():
        parts.append(f"{_article(kind)} {kind}{_along(axes)} of {nbytes:,} bytes" if n == 1 else
                     f"{n} {kind}s{_along(axes)} of {nbytes:,} bytes each")
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]


def compare(found, want) -> str | None:
    """Why ``found`` (from :func:`moved`) is not exactly ``want`` (:class:`Expect` list), or None.
    """
    items = [(c.kind, c.full_bytes, axes) for c, axes in found]
    wanted = [e for e in want for _ in range(e.count)]
    left, missing = list(items), []
    for e in wanted:
        match = next((i for i in left if i[0] == e.kind and i[1] == e.nbytes
                      and (e.axes is None or tuple(i[2] or ()) == tuple(e.axes))), None)
        if match is None:
            missing.append(e)
        else:
            left.remove(match)
    if not left and not missing:
        return None
    kinds_wanted = {e.kind for e in wanted}
    extra_kinds = [i for i in left if i[0] not in kinds_wanted]
    if extra_kinds:
        kind, nbytes, axes = extra_kinds[0]
        return (f"{_article(kind)} {kind}{_along(axes)} of {nbytes:,} bytes, a kind of "
                "collective this exercise does not need")
    for e in missing:
        same = [i for i in left if i[0] == e.kind]
        if not same:
            have = sum(1 for i in items if i[0] == e.kind)
            need = sum(1 for w in wanted if w.kind == e.kind)
            none = f"no {e.kind}" + (f" of {e.what}" if e.what else "")
            if left:  # something else moved instead
                kind, nbytes, axes = left[0]
                return (f"{_article(kind)} {kind}{_along(axes)} of {nbytes:,} bytes more than "
                        f"the exercise needs, and {none}")
            return f"{have} {e.kind}(s) where the exercise needs {need}" if have else none
        kind, nbytes, axes = same[0]
        if nbytes != e.nbytes:
            more = "more" if nbytes > e.nbytes else "fewer"
            return (f"its {kind}{_along(axes)} moves {nbytes:,} bytes, {more} than "
                    + (f"{e.what}'s {e.nbytes:,} bytes" if e.what else f"the {e.nbytes:,} needed"))
        return (f"its {kind} runs{_along(axes) or ' over a group that is not a mesh axis'}, but "
                + (f"{e.what} moves" if e.what else "it belongs") + _along(e.axes))
    kind, nbytes, axes = left[0]
    n = sum(1 for i in items if i[0] == kind)
    need = sum(1 for w in wanted if w.kind == kind)
    return f"{n} {kind}s where the exercise needs {need}: one moves data it need not move"


def _held(sharding, shape, itemsize) -> tuple[tuple[int, ...], int]:
    block = tuple(sharding.shard_shape(tuple(shape)))
    return block, int(np.prod(block, dtype=np.int64)) * itemsize


def _where(block, shape) -> str:
    return "whole" if tuple(block) == tuple(shape) else f"as blocks of shape {tuple(block)}"


def placement(program, out, case, layouts, out_layout) -> str | None:
    """Whether the compiled program holds each input, and the result, as the exercise lays them
    out; the first that differs, named, with the bytes each device holds."""
    shardings = program.input_shardings[0]
    for text, arg, sharding in zip(layouts, case.args, shardings, strict=False):
        parsed = parse(text)
        arg = np.asarray(arg)
        want = NamedSharding(case.mesh, parsed.spec)
        if sharding is None or sharding.is_equivalent_to(want, arg.ndim):
            continue  # (None: the compiled program never reads this input)
        block, nbytes = _held(sharding, arg.shape, arg.itemsize)
        _, want_bytes = _held(want, arg.shape, arg.itemsize)
        return (f"{parsed.name} is held {_where(block, arg.shape)} on each device ({nbytes:,} "
                f"bytes per device), but the exercise holds it as {text}: {want_bytes:,} bytes "
                "per device. Look at how your program says the inputs are laid out.")
    if out_layout is None:  # a scalar, or a result the exercise does not lay out
        return None
    outs = out_layout if isinstance(out_layout, tuple | list) else (out_layout,)
    results = out if isinstance(out, tuple | list) else (out,)
    for text, result in zip(outs, results, strict=False):
        parsed = parse(text)
        want = NamedSharding(case.mesh, parsed.spec)
        sharding = getattr(result, "sharding", None)
        if sharding is None or sharding.is_equivalent_to(want, result.ndim):
            continue
        block, nbytes = _held(sharding, result.shape, result.dtype.itemsize)
        return (f"the result is held {_where(block, result.shape)} on each device ({nbytes:,} "
                f"bytes per device), but the exercise asks for {text}. Look at how your "
                "program says the result is laid out.")
    return None


def specs(layouts):
    """``PartitionSpec``(s) of a notation string (or a spec) or of a tuple of them."""
    if isinstance(layouts, str):
        return parse(layouts).spec
    if isinstance(layouts, PartitionSpec):
        return layouts
    return tuple(specs(x) for x in layouts)


def values(build, case, out, want) -> None:
    """Compare the program's result with the reference, leaf by leaf; :class:`Wrong` naming the
    first that differs (its per-device block when the answer is per-device)."""
    if build.diagnose is not None and (said := build.diagnose(case, out, want)):
        wrong = Wrong(said, build.hint)
        wrong.diagnosed = True
        raise wrong
    got_leaves, treedef = jax.tree.flatten(out)
    want_leaves, want_def = jax.tree.flatten(want)
    names = list(build.out_names or [])
    if treedef != want_def:
        shape = f" ({', '.join(names)})" if names else ""
        raise Wrong(f"{build.what} returned {treedef.num_leaves} array(s) in the structure "
                    f"{treedef}; the exercise asks for {want_def.num_leaves}{shape}.", build.hint)
    for i, (got, ref) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        name = names[i] if i < len(names) else "the result"
        ref = np.asarray(ref)
        if build.per_device and hasattr(got, "shape") and tuple(got.shape) != ref.shape:
            outs = specs(build.out) if build.out is not None else None
            spec = outs[i] if isinstance(outs, tuple) else outs
            if spec is None:  # laid out by the checker's own program (``program=``)
                raise Wrong(f"{name} has shape {tuple(got.shape)}; it should be {ref.shape}.",
                            build.hint)
            block = jax.sharding.NamedSharding(case.mesh, spec).shard_shape(ref.shape)
            mine = jax.sharding.NamedSharding(case.mesh, spec).shard_shape(tuple(got.shape))
            raise Wrong(f"each device returned a block of shape {mine} for {name}; its block "
                        f"should be {block}.", build.hint)
        if not build.per_device and hasattr(got, "shape") and tuple(got.shape) != ref.shape:
            shapes = ", ".join(str(tuple(np.shape(a))) for a in case.args)
            raise Wrong(f"{name} has shape {tuple(got.shape)}, but for the check's inputs of "
                        f"shapes {shapes} it should be {ref.shape}. Does your code compute from "
                        "its arguments, whatever their sizes? The check passes arrays of its "
                        "own.", build.hint)
        expect_array(got, ref.astype(np.asarray(got).dtype) if hasattr(got, "dtype") else ref,
                     what=name, rtol=build.rtol, atol=build.atol, hint=build.hint)
        _every_device(got, ref, name, case, build)


def _every_device(got, ref, name: str, case, build) -> None:
    """Each device's copy of the result, not only the one the array shows: a result held whole
    on every device (``out_specs=P()`` without ``check_vma``) shows device 0's copy alone."""
    for shard in getattr(got, "addressable_shards", ()):
        mine = np.asarray(shard.data)
        part = np.asarray(ref, mine.dtype)[shard.index]
        if mine.shape == part.shape and np.allclose(mine, part, rtol=build.rtol,
                                                    atol=build.atol):
            continue
        devices = list(np.asarray(case.mesh.devices).flat)
        where = devices.index(shard.device) if shard.device in devices else shard.device.id
        raise Wrong(f"device {where} ends with wrong values for {name}; the array shows "
                    "another device's copy, which is right. Every device should end with the "
                    "result.", build.hint)
