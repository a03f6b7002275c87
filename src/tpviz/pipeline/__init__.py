"""Pipeline parallelism (chapter 6): schedules, a simulator, balanced stages, drawings, and a
pipelined model run for real.

Rooms: ``plan`` (``schedule(name, stages, microbatches, chunks=1)``: every device's ops in order;
``balance``: the best contiguous stages), ``simulate`` (``simulate(schedule, forward=1.0,
backward=2.0)``: when every op runs, the bubble, peak activations; plan level too), ``run``,
``draw``, ``explore`` and ``exercises``.
"""

from tpviz.errors import ScheduleError
from tpviz.pipeline import draw
from tpviz.pipeline.explore import explore_pipeline
from tpviz.pipeline.plan import NAMES, Op, Partition, Schedule, balance, schedule
from tpviz.pipeline.simulate import Timeline, bubble_formula, simulate

__all__ = ["NAMES", "Op", "Partition", "Schedule", "ScheduleError", "Timeline", "balance",
           "bubble_formula", "draw", "explore_pipeline", "schedule", "simulate"]
