"""Pipeline parallelism: schedules, a simulator, stage balancing, drawings (``.draw``) and a real
pipelined model (``.run``).

Public contract: ``schedule(name, stages, microbatches, chunks=1)`` and
``simulate(schedule, forward=1.0, backward=2.0)``.
"""

from tpviz.pipeline.balance import Partition, balance
from tpviz.pipeline.schedules import NAMES, Op, Schedule, ScheduleError, schedule
from tpviz.pipeline.simulate import Timeline, bubble_formula, simulate

__all__ = ["NAMES", "Op", "Partition", "Schedule", "ScheduleError", "Timeline", "balance",
           "bubble_formula", "schedule", "simulate"]
