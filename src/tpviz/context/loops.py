"""The collectives a compiled program *executes*: those inside a while loop count once per trip.

:func:`tpviz.core.compiled.collectives` lists each collective of the program text once. Ring
attention runs its N - 1 steps as a ``lax.scan``, which compiles to a while loop with one
permute in its body; XLA records the loop's trip count in the program
(``backend_config={"known_trip_count":{"n":"7"}}``). :func:`executed` reads it and repeats each
collective of a loop body (and of what the body calls) that many times. :func:`overlap` reads
whether a loop body's matrix products wait for its permutes, and its permutes for them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpviz.core import compiled
from tpviz.core.collectives import Collectives
from tpviz.core.kinds import Any_
from tpviz.errors import ArgumentTypeError, CheckFailed

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


def _text(program) -> str:
    if not hasattr(program, "as_text") or isinstance(program, type):
        raise ArgumentTypeError(f"program must be a compiled program (jax.jit(f).lower(*args)"
                                f".compile()), got {type(program).__name__}.")
    return program.as_text()


def executed(program: Any_) -> Collectives:
    """Every collective the compiled ``program`` executes, a loop body's once per trip.

    Raises:
        CheckFailed: a while loop whose body holds a collective has no known trip count.
    """
    comps, entry, header = _computations(_text(program))
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


_INSTR_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.+?\s([\w\-]+)\((.*)$")
_MATMULS = (" dot(", " convolution(", "gemm", "matmul")


@dataclass(frozen=True)
class Overlap:
    """One loop body with permutes, read from the compiled program: its matrix products, those
    that read a permute's result, and the permutes that send a matrix product's result (each
    directly or through other instructions of the body)."""

    body: str
    permutes: int
    matmuls: int
    waiting: int  # matmuls that must wait for a permute
    fed: int  # permutes that must wait for a matmul: they send what it computed

    @property
    def independent(self) -> bool:
        """True when no matrix product of the body waits for its permutes and no permute waits
        for its matrix products: a scheduler may run the transfers and the attention at once."""
        return (self.permutes > 0 and self.matmuls > 0 and self.waiting == 0
                and self.fed == 0)


def overlap(program: Any_) -> list[Overlap]:
    """Each while-loop body of the compiled ``program`` that holds a collective-permute: how many
    of its matrix products (dots, or fusions and custom calls that hold one) depend on a
    permute's result, and how many of its permutes send a matrix product's result. On CPU the
    permute is one instruction, run in the order printed; on GPU and TPU XLA splits it into
    ``-start`` and ``-done`` and schedules independent work between."""
    comps, _, _ = _computations(_text(program))
    bodies = {t for lines in comps.values() for line in lines
              for role, t in _CALLS_RE.findall(line) if role == "body"}
    found = []
    for body in sorted(b.lstrip("%") for b in bodies):
        users, kinds, is_matmul = {}, {}, {}
        for line in comps.get(body, []):
            m = _INSTR_RE.match(line)
            if not m:
                continue
            name, op, rest = m.groups()
            kinds[name] = op
            is_matmul[name] = (op in ("dot", "convolution")
                               or (op == "custom-call" and any(k in line for k in _MATMULS))
                               or any(_holds_matmul(comps, t.lstrip("%"), set())
                                      for _, targets in _CALLS_RE.findall(rest)
                                      for t in re.findall(r"%?[\w.\-]+", targets)))
            for operand in re.findall(r"%([\w.\-]+)", rest.split("),")[0]):
                users.setdefault(operand, []).append(name)
        starts = [n for n, op in kinds.items() if op.startswith("collective-permute")]
        if not starts:
            continue
        sends = {n for n, op in kinds.items()
                 if op in ("collective-permute", "collective-permute-start")}
        after_permutes = _reached(users, starts)
        after_matmuls = _reached(users, [n for n, m in is_matmul.items() if m])
        found.append(Overlap(body, len(sends), sum(is_matmul.values()),
                             sum(is_matmul.get(n, False) for n in after_permutes),
                             len(sends & after_matmuls)))
    return found


def _reached(users: dict, starts: list) -> set:
    """The instructions that read ``starts``' results, directly or through others."""
    reached, todo = set(), list(starts)
    while todo:
        for user in users.get(todo.pop(), []):
            if user not in reached:
                reached.add(user)
                todo.append(user)
    return reached


def _holds_matmul(comps: dict, name: str, seen: set) -> bool:
    """Whether computation ``name`` (or one it calls: a fusion, a branch) holds a matmul."""
    if name in seen or name not in comps:
        return False
    seen.add(name)
    text = "\n".join(comps[name])
    if any(k in text for k in _MATMULS):
        return True
    return any(_holds_matmul(comps, t.lstrip("%"), seen) for _, targets in _CALLS_RE.findall(text)
               for t in re.findall(r"%?[\w.\-]+", targets))
