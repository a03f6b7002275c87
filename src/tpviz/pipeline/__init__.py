"""Pipeline parallelism: schedules, a simulator, and (later) drawings and a real pipelined model.

Public contract: ``schedule(name, stages, microbatches, chunks=1)`` and
``simulate(schedule, forward=1.0, backward=2.0)``.
"""

from tpviz.pipeline.schedules import NAMES, Op, Schedule, ScheduleError, schedule
from tpviz.pipeline.simulate import Timeline, simulate

__all__ = ["NAMES", "Op", "Schedule", "ScheduleError", "Timeline", "schedule", "simulate"]
