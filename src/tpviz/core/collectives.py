"""One type for a collective, and one cost formula per kind.

A :class:`Collective` is what one device of a communicating group sees: the kind, the element
type and per-device shape of its *result*, those bytes, and the group. Plans predict them (with
the mesh axes they run along); :mod:`tpviz.core.compiled` reads the same type from a compiled
program (with the device groups XLA chose), so the two compare field by field.

The cost is the ring algorithm's, with ``n`` devices per group and ``V`` the bytes of the whole
array the collective gathers or reduces (:attr:`Collective.full_bytes`):

============== ======================== ============ =========================================
kind           result per device        steps        bytes each device sends
============== ======================== ============ =========================================
all-gather     V (the gathered array)   n - 1        (n - 1)/n · V
reduce-scatter V / n (its slice)        n - 1        (n - 1)/n · V
all-reduce     V                        2 (n - 1)    2 (n - 1)/n · V
all-to-all     its buffer, rearranged   n - 1        (n - 1)/n of its buffer
permute        its buffer               1            its buffer
============== ======================== ============ =========================================

In an all-to-all each device keeps 1/n of its buffer and sends the rest, a piece to each peer.
Time is the α–β model, priced by :mod:`tpviz.core.hardware` (:meth:`Collective.time`): on a
switch, ``steps · α + sent / W`` with α the latency of one step and W the bytes per second one
device sends, in one direction; on a TPU torus or a GPU cluster, the hops and the busiest link
of that network.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tpviz.core.kinds import Callback, Count, Of, Rate, SystemLike, Time

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


@dataclass(frozen=True)
class Collective:
    """One collective, as each device of a group sees it.

    Attributes:
        kind: one of :data:`KINDS`.
        bytes: per-device bytes of the result (all arrays of a tuple result together).
        group_size: devices in each communicating group (for a permute: devices that send).
        dtype: element type of the result, e.g. ``"float32"`` ("" when not known).
        shape: per-device shape of the result (for a tuple result: the first array's).
        axes: the mesh axes the group runs along (plans; ``()`` when read from a program).
        groups: the device groups (compiled programs; for a permute, the (source, target) pairs).
        what: which array moves, in words.
    """

    kind: str
    bytes: int
    group_size: Count
    dtype: str = ""
    shape: tuple[int, ...] = ()
    axes: tuple[str, ...] = ()
    groups: tuple[tuple[int, ...], ...] = ()
    what: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            from tpviz.errors import ArgumentError

            raise ArgumentError(f"Collective(kind={self.kind!r}): use one of {', '.join(KINDS)}.")

    @property
    def full_bytes(self) -> int:
        """V: bytes of the whole array the group gathers or reduces (a reduce-scatter's input,
        an all-gather's result); for an all-to-all or a permute, the buffer of one device."""
        return self.bytes * self.group_size if self.kind == "reduce-scatter" else self.bytes

    @property
    def steps(self) -> int:
        """Rounds of sends of the ring algorithm."""
        n = self.group_size
        if self.kind == "collective-permute":
            return 1
        return 2 * (n - 1) if self.kind == "all-reduce" else n - 1

    @property
    def sent_bytes(self) -> float:
        """Bytes each device sends with the ring algorithm (the table above)."""
        n = self.group_size
        if self.kind == "collective-permute":
            return float(self.bytes)
        factor = 2 if self.kind == "all-reduce" else 1
        return factor * (n - 1) / n * self.full_bytes

    def time(self, system: Of(Rate, SystemLike), latency: Time = 0.0) -> Time:
        """Seconds, priced by :mod:`tpviz.core.hardware`: on ``system`` (a
        :class:`tpviz.core.cost.System`), or, given a bandwidth W in bytes/s, on a switch
        where each device sends at W with α = ``latency`` per step, which is the α–β model
        ``steps · latency + sent_bytes / bandwidth``."""
        from tpviz.core import cost

        if not isinstance(system, cost.System):
            system = cost.System("switch", 1.0, system, "", latency=latency)
        return system.price(self).seconds

    @property
    def moves_data(self) -> bool:
        """False for a group of one device (XLA keeps some; they move nothing); a permute moves
        data when one of its (source, target) pairs is two devices, even a single pair."""
        if self.kind == "collective-permute" and self.groups:
            return any(len(set(pair)) > 1 for pair in self.groups)
        return self.group_size > 1


_HEAD = ("collective", "dtype", "shape per device", "bytes per device", "group size", "groups")


class Collectives(list):
    """A list of :class:`Collective` that prints as a table."""

    def kinds(self) -> Counter:
        """How many of each kind: ``Counter({"all-reduce": 1})``."""
        return Counter(c.kind for c in self)

    def sent_bytes(self) -> float:
        """Bytes each device sends for all of them (ring algorithms)."""
        return sum(c.sent_bytes for c in self)

    def rows(self) -> list[tuple]:
        return [(c.kind, c.dtype, "x".join(map(str, c.shape)) or "scalar", c.bytes, c.group_size,
                 len(c.groups)) for c in self]

    def __str__(self) -> str:
        if not self:
            return "no collectives: every device computes on its own data"
        return text_table(_HEAD, self.rows())

    def _repr_html_(self) -> str:
        if not self:
            return f"<p><i>{self}</i></p>"
        return html_table(_HEAD, self.rows())

    def __repr__(self) -> str:
        return str(self)


def _fit(head, rows) -> None:
    from tpviz.errors import ArgumentError

    for i, r in enumerate(rows):
        if not isinstance(r, tuple | list) or len(r) != len(head):
            raise ArgumentError(f"rows[{i}] = {r!r} must be a tuple of {len(head)} cells, one "
                                f"per column of head.")


def text_table(head: tuple[str, ...], rows: list[tuple]) -> str:
    """Columns padded to their widest cell, a rule under the header."""
    _fit(head, rows)
    cells = [tuple(map(str, r)) for r in [head, *rows]]
    width = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)).rstrip() for r in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in width), *lines[1:]])


def html_table(head: tuple[str, ...], rows: list[tuple], cell: Callback | None = None) -> str:
    """An HTML table; integers get thousands separators, ``cell`` formats other values."""
    _fit(head, rows)

    def fmt(v) -> str:
        return f"{v:,}" if isinstance(v, int) else cell(v) if cell else str(v)

    top = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{fmt(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{top}</tr></thead><tbody>{body}</tbody></table>"
