"""ZB-V's op order (Qi et al. 2024, Sec. 6): a zero bubble at the memory of 1F1B.

Device d holds chunk d and chunk 2p-1-d of the model (a "V"): a microbatch's forward goes down
the devices on the first chunks and back up on the second ones, its backward the same way in
reverse. Every op here is one tick (t_F = t_B = t_W, half a stage each); the order is built in
ticks and then kept at any op times. Three phases per device:

1. Warm-up, forwards only. Device d runs ``q = 2p-1-2d`` first-chunk forwards (microbatches
   0 … q-1): exactly the ticks before the second-chunk forward of microbatch 0 comes back up to
   it. Then it alternates a second-chunk forward (microbatch j) and a first-chunk forward
   (microbatch q+j) for j < d, and ends with the second-chunk forward of microbatch d. Every
   device has then run 2p forwards in 2p ticks with no gap, holds 2p chunk-microbatches (the
   1F1B peak: p full microbatches), and its first backward arrives on the next tick.
2. Rounds. In each round every device runs one B and then one F (while F's are left). The B is
   the first chunk's (the one going up) when its input is already placed, else the second
   chunk's (going down); the F is the second chunk's when its input is placed, else the first
   chunk's. A device runs a W only (a) to fill a wait: the oldest W's that fit before the
   input of its next B or F arrives, or (b) before an F while it holds 2p activations.
3. The W's still pending, in the order of their B's.

Why this reaches the zero bubble: W's are never run "because nothing else is ready" early on,
so every device keeps a stock of them; at the end of the step the chain of the last
microbatch needs 2p-1 ticks to come back to device 0, and the stock fills exactly those holes.
Each device then works without a gap from tick d to tick d + 6m (a parallelogram), so
consecutive steps chain with no idle time (:func:`tpviz.pipeline.simulate.steady_state`).
Checked for p ≤ 12 and 2p-1 ≤ m ≤ 6p+2 (tests/test_zoo.py: p = 2, 4, 8). The rounds follow the
structure of Qi et al.'s own scheduler (one B and one F a round, W's only where they fit); the
warm-up, the choice rules and the code are ours, written for one tick per op.
"""

from __future__ import annotations

from collections import deque

from tpviz.errors import ScheduleError
from tpviz.pipeline.ops import Op


def min_microbatches(p: int) -> int:
    """The fewest microbatches the warm-up needs: device 0 runs 2p-1 first-chunk forwards."""
    return 2 * p - 1


def zbv(p: int, m: int) -> list[list[Op]]:
    """Every device's ops of ZB-V for ``p`` devices and ``m >= 2p - 1`` microbatches."""
    return _Builder(p, m).run()


class _Builder:
    """Places ops device by device, each at the first tick its device is free and its input
    has arrived (one tick per op)."""

    def __init__(self, p: int, m: int):
        self.p, self.m, self.n = p, m, 2 * p
        self.chunks = [(d, 2 * p - 1 - d) for d in range(p)]  # (first, second) per device
        self.end: dict[tuple[str, int, int], int] = {}  # placed op -> tick it ends
        self.clock = [0] * p
        self.held = [0] * p
        self.waiting_w = [deque() for _ in range(p)]
        self.ops: list[list[Op]] = [[] for _ in range(p)]
        self.fwd = [[0, 0] for _ in range(p)]  # forwards run per (first, second) chunk
        self.bwd = [[0, 0] for _ in range(p)]

    def arrival(self, kind: str, mb: int, chunk: int) -> int | None:
        """When the input of op (kind, mb, chunk) is there; None while its source is unplaced."""
        if kind == "F":
            return self.end.get(("F", mb, chunk - 1)) if chunk else 0
        src = ("B", mb, chunk + 1) if chunk < self.n - 1 else ("F", mb, chunk)
        return self.end.get(src)

    def put(self, d: int, kind: str, side: int) -> None:
        count = self.fwd if kind == "F" else self.bwd
        mb, chunk = count[d][side], self.chunks[d][side]
        ready = self.arrival(kind, mb, chunk)
        if ready is None:
            raise ScheduleError(f"ZB-V's construction placed {kind} of microbatch {mb}, chunk "
                                f"{chunk} before its input (a bug).")
        while self.waiting_w[d] and self.clock[d] + 1 <= ready:  # fill the wait with W's
            self.put_w(d)
        self.place(d, Op(kind, mb, chunk), max(self.clock[d], ready))
        count[d][side] += 1
        if kind == "F":
            self.held[d] += 1
        else:
            self.waiting_w[d].append(Op("W", mb, chunk))

    def put_w(self, d: int) -> None:
        self.place(d, self.waiting_w[d].popleft(), self.clock[d])
        self.held[d] -= 1

    def place(self, d: int, op: Op, start: int) -> None:
        self.ops[d].append(op)
        self.end[op] = self.clock[d] = start + 1

    def warm_up(self) -> None:
        order = []
        for d in range(self.p):
            q = 2 * self.p - 1 - 2 * d
            sides = [0] * q + [1, 0] * d + [1]  # 0: first chunk, 1: second chunk
            order.append(deque(sides))
        while any(order):  # a device waits until its next forward's input is placed
            for d in range(self.p):
                while order[d] and self.arrival(
                        "F", self.fwd[d][order[d][0]], self.chunks[d][order[d][0]]) is not None:
                    self.put(d, "F", order[d].popleft())

    def backward_side(self, d: int) -> int | None:
        """1 (second chunk, going down) or 0 (first chunk, going up) for the next B."""
        (up, down), m = self.bwd[d], self.m
        if up == m and down == m:
            return None
        if up < down and (down == m or d == self.p - 1 or
                          self.arrival("B", up, self.chunks[d][0]) is not None):
            return 0
        return 1

    def forward_side(self, d: int) -> int | None:
        """1 (second chunk) if its input is placed, else 0 (first chunk), or None."""
        first, second = self.fwd[d]
        if second == self.m:
            return None
        if second < first and (d == self.p - 1 or
                               self.arrival("F", second, self.chunks[d][1]) is not None):
            return 1
        if first < self.m and (d == 0 or
                               self.arrival("F", first, self.chunks[d][0]) is not None):
            return 0
        return None

    def run(self) -> list[list[Op]]:
        self.warm_up()
        for _ in range(2 * self.m):
            sides = [self.backward_side(d) for d in range(self.p)]
            # up-going B's from the bottom device up, then down-going ones from the top down:
            # each device's input is placed before it
            for d in [d for d in reversed(range(self.p)) if sides[d] == 0] + [
                    d for d in range(self.p) if sides[d] == 1]:
                self.put(d, "B", sides[d])
            for d in range(self.p):
                side = self.forward_side(d)
                if side is not None:
                    while self.held[d] >= 2 * self.p:
                        self.put_w(d)
                    self.put(d, "F", side)
        for d in range(self.p):
            while self.waiting_w[d]:
                self.put_w(d)
        if any(len(row) != 6 * self.m for row in self.ops):
            raise ScheduleError("ZB-V's construction left ops out (a bug).")
        return self.ops
