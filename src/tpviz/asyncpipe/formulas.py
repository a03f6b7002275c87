"""Each paper's bubble, staleness and weight copies, beside what the simulator finds.

Staleness and weight copies are per stage s = 0 … p-1; weight copies count one p-th of the
model's parameters (one stage of a p-stage pipeline). "idle" is the bubble as idle time of one
device per step, in units of one forward through a stage (t_F = t_B = t_W = 1, a full backward
2), as DeepSeek's table writes it; "fraction" is idle / total device-time. "steady" is the
bubble per step when steps run back to back without a flush
(:func:`tpviz.pipeline.steady_state`), the case the zero-bubble papers count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from tpviz.core import validate
from tpviz.core.compound import Seq
from tpviz.core.kinds import OneOf, Share
from tpviz.core.rules import Choice
from tpviz.errors import ScheduleError
from tpviz.pipeline import schedule, simulate, steady_state
from tpviz.pipeline.plan import ZOO

# public: published by tpviz.asyncpipe (the chapter calls ``formulas.paper_bubble``)
__all__ = ["FORMULAS", "Row", "paper_bubble", "row", "table"]

#: name -> (source, bubble as the paper writes it, staleness of stage s, weight copies of s)
FORMULAS = {
    "1f1b": ("Narayanan et al. 2021 (PipeDream-Flush)", "(p−1)/(m+p−1)", "0", "1"),
    "pipedream": ("Narayanan et al. 2019", "no flush: (p−1)/(m+p−1) → 0 as m grows", "p−1−s",
                  "p−s"),
    "2bw": ("Narayanan et al. 2021", "no flush: (p−1)/(m+p−1) → 0", "1", "2"),
    "pipemare": ("Yang et al. 2021", "no flush: (p−1)/(m+p−1) → 0", "p−1−s (forward)", "1"),
    "ampnet": ("Gaunt et al. 2017", "no flush: (p−1)/(m+p−1) → 0", "p−1−s (forward)", "1"),
    "chimera": ("Li & Hoefler 2021", "(p−2)/(2m+p−2), t_F = t_B, m a multiple of p", "0",
                "2"),
    "zb-h1": ("Qi et al. 2024", "idle (p−1)(t_F+t_B−t_W)", "0", "1"),
    "zb-h2": ("Qi et al. 2024", "idle (p−1)(t_F+t_B−2t_W) when steps overlap, memory "
              "(2p−1) M_B", "0", "1"),
    "zb-v": ("Qi et al. 2024", "0 when steps overlap, memory p M_B", "0", "1"),
    "dualpipe": ("DeepSeek-AI 2024", "idle (p/2−1)(F&B+B−3W), activations p+1", "0", "2"),
    "dualpipev": ("DeepSeek-AI 2024", "idle (p−1)(F&B+B−3W) of half chunks, activations 2p+1",
                  "0", "1 (2 of its 2p half-size stages)"),
}


@dataclass(frozen=True)
class Row:
    name: str
    source: str
    bubble_formula: str
    bubble_paper: float  # the formula's number at this (p, m), nan where it gives none
    bubble: float  # simulated, fraction of the device-time (one flushed step)
    steady: float  # simulated, steps back to back without a flush
    idle: float  # simulated idle time of device 0 per step
    staleness_formula: str
    staleness: tuple[int, ...]  # simulated, per stage
    copies_formula: str
    weight_copies: tuple[float, ...]  # simulated, per stage
    peak_activations: tuple[int, ...]


def paper_bubble(name: OneOf(tuple(FORMULAS)), p: int, m: int) -> Share:
    """The number the paper's bubble formula gives at t_F = t_W = 1 (t_B = 1 input part), a
    fraction of the device-time: only where the paper's schedule exists (Chimera and DualPipe
    pair device d with device p-1-d, so p is even)."""
    if name == "chimera" and m % p:
        raise ScheduleError(f"paper_bubble: Chimera's formula (p - 2)/(2m + p - 2) holds for "
                            f"m a multiple of p; got p = {p}, m = {m}.")
    if name in ("chimera", "dualpipe") and p % 2:
        raise ScheduleError(f"paper_bubble: {name} pairs device d with device p-1-d, so p (the "
                            f"stages) must be even; got p = {p}. Try {p + 1}.")
    if name in ("1f1b", "pipedream", "2bw", "pipemare", "ampnet"):
        return (p - 1) / (m + p - 1)
    if name == "chimera":
        return (p - 2) / (2 * m + p - 2)
    if name in ("zb-h2", "zb-v"):
        return 0.0
    if name == "zb-h1":
        return (p - 1) * (1 + 1 - 1) / (3 * m + (p - 1) * (1 + 1 - 1))
    if name == "dualpipe":  # idle (p/2-1)(F&B + B - 3W), F&B = F + B, B = 2, W = 1
        idle = (p / 2 - 1) * (3 + 2 - 3)
        return idle / (3 * m + idle)
    if name == "dualpipev":  # chunks of half size: F = 0.5, B = 1, W = 0.5; PP = 2p
        idle = (p - 1) * (1.5 + 1 - 1.5)
        return idle / (3 * m + idle)
    return float("nan")


def row(name: str, p: int, m: int) -> Row:
    """One schedule at (p, m), t_F = t_B = t_W = 1 (Chimera: t_F = t_B = 1, its paper's case):
    the papers' formulas and the simulator's."""
    name = validate.choice("name", name, tuple(FORMULAS), error=ScheduleError)
    # Chimera's formula counts t_F = t_B (a whole backward as long as a forward)
    times = (1.0, 1.0) if name == "chimera" else (1.0, 1.0, 1.0)
    sched = schedule(name, p, m)
    t = simulate(sched, *times)
    source, bubble, stale, copies = FORMULAS[name]
    paper = float("nan") if name == "chimera" and m % p else paper_bubble(name, p, m)
    return Row(name, source, bubble, paper, t.bubble_fraction,
               steady_state(sched, *times).bubble_fraction, t.makespan - t.work(0), stale,
               t.staleness, copies, t.weight_copies, t.peak_activations)


def table(p: int = 4, m: int = 8,
          names: Annotated[tuple, Seq(Choice(lambda: FORMULAS), 1)] = ("1f1b", "zb-h1", *ZOO)
          ) -> list[Row]:
    """:func:`row` for every schedule (chimera at m rounded down to a multiple of p, its
    formula's case)."""
    return [row(n, p, max(p, m - m % p) if n == "chimera" else m) for n in names]
