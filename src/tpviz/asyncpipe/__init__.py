"""Asynchronous pipelines and the schedule zoo (chapter 8).

The schedules themselves are in :mod:`tpviz.pipeline` (``schedule("pipedream", p, m)`` …, with
weight versions, staleness and weight copies in ``simulate``). This topic adds the chapter's
rooms: ``formulas`` (each paper's bubble, staleness and weight copies, beside the simulator),
``stale`` (``train``: a 4-stage MLP on 4 devices trained with each schedule's true
staleness), ``draw`` (the Gantt chart coloured by weight version, loss curves), ``explore`` and
``exercises``.
"""

from tpviz.asyncpipe import draw
from tpviz.asyncpipe.explore import explore_zoo
from tpviz.asyncpipe.formulas import FORMULAS, Row, table
from tpviz.asyncpipe.stale import RUNS, Curve, train, versions

__all__ = ["FORMULAS", "RUNS", "Curve", "Row", "draw", "explore_zoo", "table", "train",
           "versions"]
