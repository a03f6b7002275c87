"""The collectives a compiled program *executes*: those inside a while loop count once per trip.

:func:`tpviz.core.compiled.collectives` lists each collective of the program text once. Ring
attention runs its N - 1 steps as a ``lax.scan``, which compiles to a while loop with one
permute in its body; XLA records the loop's trip count in the program
(``backend_config={"known_trip_count":{"n":"7"}}``). :func:`executed` reads it and repeats each
collective of a loop body (and of what the body calls) that many times.
"""

from __future__ import annotations

import re

from tpviz.core import compiled
from tpviz.core.collectives import Collectives
from tpviz.errors import CheckFailed

_HEAD_RE = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_CALLS_RE = re.compile(r"(body|condition|to_apply|calls|branch_computations|"
                       r"true_computation|false_computation)=\{?([^,}\s]+(?:,\s*%[\w.\-]+)*)")
_TRIPS_RE = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _computations(text: str) -> tuple[dict[str, list[str]], str, str]:
    """Lines of each computation, the entry's name, and the module's header line."""
    found, name, entry = {}, None, ""
    header = text.splitlines()[0] if text else ""
    for line in text.splitlines():
        if name is None and (m := _HEAD_RE.match(line)):
            name = m.group(1)
            found[name] = []
            if line.startswith("ENTRY"):
                entry = name
        elif name is not None and line.strip() == "}":
            name = None
        elif name is not None:
            found[name].append(line)
    return found, entry, header


def executed(program) -> Collectives:
    """Every collective the compiled ``program`` executes, a loop body's once per trip.

    Raises:
        CheckFailed: a while loop whose body holds a collective has no known trip count.
    """
    comps, entry, header = _computations(program.as_text())
    out = Collectives()

    def visit(name: str, times: int) -> None:
        lines = comps.get(name, [])
        out.extend(list(compiled.parse_hlo("\n".join([header, *lines]))) * times)
        for line in lines:
            trips = _TRIPS_RE.search(line)
            for role, targets in _CALLS_RE.findall(line):
                for target in re.findall(r"%?([\w.\-]+)", targets):
                    if role == "body":
                        if not trips and _holds_collectives(comps, target):
                            raise CheckFailed(f"a while loop ({target}) holds collectives but "
                                              "its trip count is not known.")
                        visit(target, times * int(trips.group(1)) if trips else times)
                    elif role != "condition":
                        visit(target, times)

    visit(entry, 1)
    return out


def _holds_collectives(comps: dict, name: str) -> bool:
    return bool(compiled.parse_hlo("\n".join(comps.get(name, []))))
