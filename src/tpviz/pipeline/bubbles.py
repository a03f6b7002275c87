"""The papers' bubble fractions of chapter 7's schedules, as numbers and as formulas (no
simulation: instant at any size)."""

from __future__ import annotations

from tpviz.core import validate
from tpviz.core.kinds import Positive
from tpviz.errors import ScheduleError


def bubble_formula(name: str, stages: int, microbatches: int, chunks: int = 1,
                   forward: Positive = 1.0, backward: Positive = 2.0) -> tuple[float, str]:
    """The papers' bubble fraction (idle / total device-time) and the formula, as text.

    naive (p-1)/p; GPipe and 1F1B (p-1)/(m+p-1) (GPipe; PipeDream-Flush); interleaved
    (p-1)/(v m + p-1) (Megatron-LM: (p-1)/(v m) of the ideal time); ZB-H1 with m >= p:
    (p-1) t_F / (m (t_F+t_B+t_W) + (p-1) t_F), where ``backward`` = t_B + t_W, split in halves.
    Qi et al. derive the ZB-H1 idle time (p-1) t_F for t_F = t_B = t_W (their general estimate is
    (p-1)(t_F + t_B - t_W)); with a longer backward the simulator finds more, (p-1) t_B.
    """
    name = validate.choice("name", name, ("naive", "gpipe", "1f1b", "interleaved", "zb-h1"))
    p, m, v = (validate.integer(label, value) for label, value in (
        ("stages", stages), ("microbatches", microbatches), ("chunks", chunks)))
    f = validate.number("forward", forward, positive=True)
    b = validate.number("backward", backward, positive=True)
    if name == "naive":
        return (p - 1) / p, "(p−1)/p"
    if name in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1), "(p−1)/(m+p−1)"
    if name == "interleaved":
        return (p - 1) / (v * m + p - 1), "(p−1)/(v·m+p−1)"
    if name == "zb-h1" and m >= p:
        return (p - 1) * f / (m * (f + b) + (p - 1) * f), "(p−1)t_F/(m(t_F+t_B+t_W)+(p−1)t_F)"
    if name == "zb-h1":
        return float("nan"), "(ZB-H1 formula needs m ≥ p)"
    raise ScheduleError(f"no bubble formula for {name!r}.")
