"""Chapter 0's build checkers: an Explicit-mode reshard read from the compiled program, and the
rows-over-the-mesh layout read from the compiled program's memory."""

import jax
import numpy as np
from checking import fails, passes
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz.core import exercises as framework

ex = tpviz.exercises
ROWS = P(("X", "Y"), None)


def test_explicit_reshard(capsys, monkeypatch):
    passes(ex.check_explicit_reshard, lambda a: jax.sharding.reshard(a, ROWS), capsys=capsys)
    fails(ex.check_explicit_reshard, lambda a: jax.sharding.reshard(a, P(("Y", "X"), None)),
          words="Y major")  # the wrong axis order

    def via_replicated(a):  # right layout, through a gathered copy: more bytes
        return jax.sharding.reshard(jax.sharding.reshard(a, P()), ROWS)

    fails(ex.check_explicit_reshard, via_replicated, words="right layout, but .*all-gather")
    fails(ex.check_explicit_reshard, lambda a: a, words="typed")  # left as it was
    fails(ex.check_explicit_reshard, lambda a: jax.sharding.reshard(a * 2, ROWS),
          words="wrong values")
    fails(ex.check_explicit_reshard, lambda a: a.reshape(8, 64), words="shape")
    monkeypatch.setattr(framework, "TIME_LIMIT_S", 1)

    def endless(a):
        while True:
            pass

    fails(ex.check_explicit_reshard, endless, words="stopped")


def test_rows_over_mesh_reads_the_compiled_memory(capsys):
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))
    y = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    passes(ex.check_rows_over_mesh, jax.device_put(y, NamedSharding(mesh, ROWS)), y,
           capsys=capsys)
