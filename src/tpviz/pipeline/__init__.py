"""Pipeline parallelism (chapter 7): schedules, a simulator, balanced stages, drawings, and a
pipelined model run for real as one SPMD program.

Rooms: ``plan`` (``schedule(name, stages, microbatches, chunks=1)``: every device's ops in order;
``balance``: the best contiguous stages) on ``ops`` (the types), ``orders`` (chapter 7's orders)
and ``zoo`` (chapter 8's, ZB-V's in ``zbv``), ``simulate`` (``simulate(schedule, forward=1.0,
backward=2.0)``: when every op runs, the bubble, peak activations; plan level too;
``steady_state``: the bubble per step when steps overlap, no flush between them), ``spmd``
(the pipelined MLP as one ``jax.jit(jax.shard_map(...))`` program, sends by ``ppermute``),
``check`` (``spmd_check(name, stages, microbatches)``: against one device, compiled sends and
memory), ``run`` (a Python loop issuing ops one by one: a numerics demonstration for the
schedules the SPMD program does not run), ``draw``, ``explore`` and ``exercises``.
"""

from tpviz.core.publish import publish
from tpviz.errors import ScheduleError
from tpviz.pipeline import draw
from tpviz.pipeline.bubbles import bubble_formula
from tpviz.pipeline.check import SpmdCheck, spmd_check
from tpviz.pipeline.explore import explore_pipeline
from tpviz.pipeline.plan import NAMES, Op, Partition, Schedule, balance, schedule
from tpviz.pipeline.simulate import SteadyState, Timeline, simulate, steady_state

__all__ = ["NAMES", "Op", "Partition", "Schedule", "ScheduleError", "SpmdCheck", "SteadyState",
           "Timeline", "balance", "bubble_formula", "draw", "explore_pipeline", "schedule",
           "simulate", "spmd_check", "steady_state"]

publish(globals(), error=ScheduleError)
