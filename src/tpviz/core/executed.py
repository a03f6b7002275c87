"""The collectives a compiled program *runs*, loops counted: a ``collective-permute`` inside a
``jax.lax.fori_loop`` of 7 steps appears once in the HLO text and 7 times here.

:func:`tpviz.core.compiled.collectives` lists the collective instructions of the optimized HLO
once each, wherever they sit. :func:`executed` walks the program's computations from the entry:
a ``while`` loop multiplies the collectives of its body by the trip count XLA proved
(``known_trip_count`` in its ``backend_config``), and calls and fusions add their callee's. A
collective inside a loop whose trip count is not known at compile time, or inside a conditional,
runs an unknown number of times: :class:`UnknownCount`.
"""

from __future__ import annotations

import re

from tpviz.core import compiled
from tpviz.core.collectives import Collectives
from tpviz.errors import CompileError

_HEAD_RE = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_BODY_RE = re.compile(r"\bbody=%?([\w.\-]+)")
_CALLS_RE = re.compile(r"\b(?:to_apply|calls)=%?([\w.\-]+)")
_TRIP_RE = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"')
_BRANCH_RE = re.compile(r"branch_computations=\{([^}]*)\}|(?:true|false)_computation=%?([\w.\-]+)")


class UnknownCount(CompileError):
    """A collective runs inside a loop of unknown trip count, or inside a conditional."""


def _computations(text: str) -> tuple[dict[str, list[str]], str]:
    """Each computation's instruction lines by name, and the entry's name."""
    comps: dict[str, list[str]] = {}
    entry, current = "", None
    for line in text.splitlines():
        if current is None:
            if m := _HEAD_RE.match(line):
                current = m.group(2)
                comps[current] = []
                if m.group(1):
                    entry = current
        elif line.startswith("}"):
            current = None
        else:
            comps[current].append(line)
    return comps, entry


def executed(program) -> Collectives:
    """Every collective ``program`` (compiled) runs, once per time it runs.

    Raises:
        UnknownCount: a collective sits in a loop whose trip count XLA does not know, or in a
            branch of a conditional.
    """
    text = program.as_text()
    header = text.splitlines()[0] if text else ""
    comps, entry = _computations(text)
    memo: dict[str, list] = {}

    def expand(name: str, depth: int = 0) -> list:
        if name in memo:
            return memo[name]
        if name not in comps or depth > 64:
            return []
        lines = comps[name]
        found = list(compiled.parse_hlo(header + "\n" + "\n".join(lines)))
        for line in lines:
            if m := _BODY_RE.search(line):
                inner = expand(m.group(1), depth + 1)
                if inner:
                    trip = _TRIP_RE.search(line)
                    if trip is None:
                        raise UnknownCount(
                            f"the compiled program runs {inner[0].kind} inside a loop whose "
                            "number of iterations is not known when it compiles.")
                    found += inner * int(trip.group(1))
            for callee in _CALLS_RE.findall(line):
                found += expand(callee, depth + 1)
            for listed, single in _BRANCH_RE.findall(line):
                branches = ([b.strip().lstrip("%") for b in listed.split(",")] if listed
                            else [single])
                inner = [c for b in branches if b for c in expand(b, depth + 1)]
                if inner:
                    raise UnknownCount(f"the compiled program runs {inner[0].kind} inside a "
                                       "branch of a conditional (jax.lax.cond or switch).")
        memo[name] = found
        return found

    return Collectives(expand(entry) if entry else compiled.parse_hlo(text))
