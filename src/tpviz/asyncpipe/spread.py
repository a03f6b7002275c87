"""The staleness runs over seeds: each run's final loss as a ratio to the synchronous run of
the same rhythm and seed, its spread, and in how many seeds one run ends below another.

A chaotic training loop gives another final loss for another seed (or another float32
rounding), so chapter 8 states a result only with its spread over seeds, and a comparison as
"in k of n seeds".
"""

from __future__ import annotations

import numpy as np

from tpviz.asyncpipe.runs import reference
from tpviz.asyncpipe.stale import Curve
from tpviz.core.kinds import KeyOf
from tpviz.errors import ArgumentError


def ratios(curves: dict[str, Curve], label: KeyOf("curves")) -> np.ndarray:
    """Per seed: run ``label``'s final loss over that of the synchronous run of the same rhythm
    (:func:`tpviz.asyncpipe.runs.reference`) and seed. ``curves``: ``{label: Curve}`` of one
    learning rate; it must hold the reference run."""
    if reference(label) not in curves:
        raise ArgumentError(f"curves has no run {reference(label)!r}, the synchronous run that "
                            f"{label!r} is compared with; train it too.")
    return curves[label].finals / curves[reference(label)].finals


def wins(curves: dict[str, Curve], a: KeyOf("curves"), b: KeyOf("curves")) -> int:
    """In how many seeds run ``a`` ends below run ``b``."""
    return int(np.sum(curves[a].finals < curves[b].finals))


def table(results: dict[float, dict[str, Curve]]) -> str:
    """One line per learning rate and run: the final loss (min, median, max over the seeds)
    and its ratio to the synchronous run of the same rhythm (min - max)."""
    lines = []
    for lr, curves in results.items():
        seeds = len(next(iter(curves.values())).seeds)
        lines.append(f"learning rate {lr:g}, {seeds} seeds: final loss min  median  max"
                     f"   x synchronous (min - max)")
        for label, c in curves.items():
            f = c.finals
            line = f"  {label:34s} {f.min():9.3f} {np.median(f):7.3f} {f.max():6.3f}"
            if reference(label) in curves and reference(label) != label:
                r = ratios(curves, label)
                line += f"   {r.min():6.2f} - {r.max():.2f}"
            lines.append(line)
    return "\n".join(lines)


def diverges(curve: Curve) -> np.ndarray:
    """Per seed: whether the run ends (its final loss) above its loss after the first step."""
    return curve.finals > curve.losses[:, 0]
