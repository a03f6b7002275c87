"""What every topic shares.

- ``notation``: the Scaling Book's ``A[I_X, J]`` ↔ ``PartitionSpec``;
- ``layout``: per-device shapes, bytes and blocks of a sharded array;
- ``collectives``: one :class:`Collective` type, one ring cost formula per kind;
- ``compiled``: compile once; read the program's collectives and ``memory_analysis()``;
- ``hardware``: chips, TPU slices, GPU clusters and the one price of a collective on them;
  rooflines, thresholds, model specs;
- ``cost``: systems (FLOP/s, bandwidth, latency) and compute-versus-communication time;
- ``verify``: comparisons that raise :class:`tpviz.errors.CheckFailed`;
- ``figures``, ``widgets``: the palette, blocks, PNG and GIF; ``live()`` widgets;
- ``exercises``: the checker framework (``@checker``, ``Wrong``, ``expect_*``);
- ``harness``: build checkers declared, not re-implemented (values at several sizes and mesh
  sizes, placement, the compiled collectives with loops counted by ``executed``, memory),
  with the book's answers out of reach while the learner's code runs (``unavailable``).
"""

from tpviz.core import collectives, compiled, cost, figures, hardware, layout, notation, verify
from tpviz.core.publish import publish

__all__ = ["collectives", "compiled", "cost", "figures", "hardware", "layout", "notation",
           "verify"]

publish(globals())
