"""The Scaling Book's sharding notation, to and from ``PartitionSpec``.

``A[I_XY, J]`` means: the rows of ``A`` are split over mesh axes ``X`` and ``Y`` (``X`` major),
the columns are replicated. Multi-letter axis names are written in braces:
``A[I_{data}, J_{model}]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from jax.sharding import PartitionSpec

from tpviz.core.kinds import Any_, Size
from tpviz.errors import ArgumentTypeError, NotationError

DIM_LETTERS = "IJKLMN"


def axes_of(entry: Any_) -> tuple[str, ...]:
    """The mesh axes of one ``PartitionSpec`` entry: ``None`` -> (), ``"X"`` -> ("X",)."""
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple | list) else (entry,)


@dataclass(frozen=True)
class Notation:
    """A parsed notation string: the array's name, its dimension letters and its spec."""

    name: str
    dims: tuple[str, ...]
    spec: PartitionSpec

    def __str__(self) -> str:
        return to_notation(self.spec, name=self.name, dims=self.dims)


_ARRAY_RE = re.compile(r"^\s*([A-Za-z][\w']*)\s*\[(.*)\]\s*$")
_DIM_RE = re.compile(r"^([^\W\d_][^\W_]*)(?:_(.+))?$")  # a name, then _ and its mesh axes


def _axes(sub: str, part: str, notation: str) -> tuple[str, ...]:
    """The mesh axes of one dimension's subscript: ``{data,model}``, ``XY`` or ``x``."""
    if sub.startswith("{") and sub.endswith("}"):
        return tuple(a.strip() for a in sub[1:-1].split(",") if a.strip())
    if re.fullmatch(r"[A-Z]+|[a-z]", sub):
        return tuple(sub)  # single-letter axis names, concatenated: XY -> (X, Y)
    if re.fullmatch(r"[A-Za-z]+", sub):
        raise NotationError(
            f"{part!r} in {notation!r}: multi-letter axis names need braces, e.g. "
            f"'{part.split('_')[0]}_{{{sub}}}' for the mesh axis {sub!r} ('I_XY' means two axes, "
            "X and Y).")
    raise NotationError(
        f"cannot read the mesh axes {sub!r} of {part!r} in {notation!r}: mesh axes are single "
        "ASCII letters ('I_X', 'I_XY') or names in braces ('I_{data}', 'I_{x1,y}')"
        + (" — a non-ASCII letter such as Greek Χ looks like X but is not it" if not sub.isascii()
           else "") + ".")


def parse(notation: str) -> Notation:
    """Parse ``"A[I_XY, J]"`` into ``Notation("A", ("I", "J"), PartitionSpec(("X", "Y"), None))``.

    Raises:
        NotationError: the string is not of the form ``NAME[DIM_AXES, ...]``.
    """
    if not isinstance(notation, str):
        raise ArgumentTypeError(f"expected a notation string such as 'A[I_X, J]', got "
                                f"{type(notation).__name__} {notation!r}.")
    m = _ARRAY_RE.match(notation)
    if not m:
        raise NotationError(
            f"cannot read {notation!r}: write an array name and its dimensions in brackets, "
            "e.g. 'A[I_X, J]' (rows split over mesh axis X, columns replicated)."
        )
    name, body = m.groups()
    dims, entries = [], []
    for part in (p.strip() for p in re.split(r",(?![^{]*\})", body)):  # commas outside {}
        d = _DIM_RE.match(part)
        if not d:
            raise NotationError(
                f"cannot read the dimension {part!r} in {notation!r}: write a letter, optionally "
                "followed by _ and the mesh axes, e.g. 'I', 'I_X', 'I_XY' or 'I_{data,model}'."
            )
        letter, sub = d.groups()
        axes = () if sub is None else _axes(sub, part, notation)
        dims.append(letter)
        entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    spec = PartitionSpec(*entries)
    used = [a for e in entries for a in axes_of(e)]
    if len(set(used)) != len(used):
        twice = sorted({a for a in used if used.count(a) > 1})
        raise NotationError(
            f"{notation!r} uses mesh axis {', '.join(twice)} on more than one dimension; a mesh "
            "axis can split at most one dimension of an array."
        )
    return Notation(name, tuple(dims), spec)


def to_notation(spec: PartitionSpec, name: str = "A", dims: Sequence[str] | None = None,
                ndim: Size(64, "an array has at most a few dimensions", minimum=0) | None = None
                ) -> str:
    """Print a ``PartitionSpec`` in the notation: ``P("X", None)`` -> ``"A[I_X, J]"``."""
    if ndim is not None and ndim < len(spec):
        raise NotationError(f"ndim = {ndim}, but spec {spec} has {len(spec)} entries, one per "
                            f"dimension: give ndim >= {len(spec)}, or leave it out.")
    ndim = max(len(spec), ndim or 0, len(dims or ()))
    if dims and len(dims) != ndim:
        raise NotationError(f"dims = {tuple(dims)!r} names {len(dims)} dimension(s), but the "
                            f"array has {ndim} (spec {spec}, ndim {ndim}): give one letter each.")
    dims = tuple(dims) if dims else tuple(DIM_LETTERS[:ndim])
    entries = list(spec) + [None] * (ndim - len(spec))
    parts = []
    for letter, entry in zip(dims, entries, strict=True):
        axes = axes_of(entry)
        if not axes:
            parts.append(letter)
        elif all(len(a) == 1 for a in axes):
            parts.append(f"{letter}_{''.join(axes)}")
        else:
            parts.append(f"{letter}_{{{','.join(axes)}}}")
    return f"{name}[{', '.join(parts)}]"


def as_spec(spec_or_notation: Any_) -> PartitionSpec:
    """Accept a ``PartitionSpec``, a notation string, or a tuple of entries."""
    if isinstance(spec_or_notation, PartitionSpec):
        return spec_or_notation
    if isinstance(spec_or_notation, str):
        try:
            return parse(spec_or_notation).spec
        except NotationError as e:
            e.args = (f"spec_or_notation: {e.args[0]}", *e.args[1:])
            raise
    if not isinstance(spec_or_notation, tuple | list):
        raise NotationError(
            f"spec_or_notation: a layout must be a PartitionSpec, a notation string such as "
            f"'A[I_X, J]' or a tuple of entries such as ('X', None), got "
            f"{type(spec_or_notation).__name__} {spec_or_notation!r:.60}.")
    return PartitionSpec(*spec_or_notation)


