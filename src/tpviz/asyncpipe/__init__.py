"""Asynchronous pipelines and the schedule zoo (chapter 8).

The schedules themselves are in :mod:`tpviz.pipeline` (``schedule("pipedream", p, m)`` …, with
weight versions, staleness and weight copies in ``simulate``). This topic adds the chapter's
rooms: ``formulas`` (each paper's bubble, staleness and weight copies, beside the simulator),
``runs`` (which version each op of a training run reads), ``stale`` (``train``: a 4-stage
MLP on 4 devices trained with each schedule's true staleness, over seeds), ``spread`` (the
runs' final losses over seeds), ``draw`` (the Gantt chart coloured by weight version, loss
curves), ``explore`` and ``exercises``.
"""

from tpviz.asyncpipe import draw, spread
from tpviz.asyncpipe.explore import explore_zoo
from tpviz.asyncpipe.formulas import FORMULAS, Row, table
from tpviz.asyncpipe.runs import CONTROLS, RUNS, versions
from tpviz.asyncpipe.stale import Curve, train
from tpviz.core.publish import publish

__all__ = ["CONTROLS", "FORMULAS", "RUNS", "Curve", "Row", "draw", "explore_zoo", "spread",
           "table", "train", "versions"]

publish(globals())
