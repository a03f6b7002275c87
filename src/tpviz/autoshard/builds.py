"""Build exercise of the automatic-parallelization chapter (the exercises room, in its own
module for length): the solver's Megatron choice run by hand, graded on the compiled program."""

from __future__ import annotations

import numpy as np

from tpviz.core.exercises import Wrong, call, checker, expect_array

RUN = dict(batch=64, hidden=256, ffn=1024, devices=8)
KEYS = ("x", "w1", "h", "w2", "y")


def planned():
    """The ILP's choice for one block of B = 1,024, H = 8,192, F = 32,768 on ``{"X": 8}``
    (H100), carried to the small block of :data:`RUN` (as the chapter runs it)."""
    from tpviz.autoshard.compare import same_strategies
    from tpviz.autoshard.graph import mlp
    from tpviz.autoshard.solve import solve

    r = RUN
    big = solve(mlp(1024, 8192, 32768, layers=1), {"X": r["devices"]}, "H100 (NVLink)")
    return same_strategies(big, mlp(r["batch"], r["hidden"], r["ffn"], layers=1))


@checker("The solver's choice, by hand")
def check_megatron_shardings(fn) -> str:
    """``fn() -> {"x", "w1", "h", "w2", "y": PartitionSpec}`` on a mesh axis "X" of 8 devices:
    no device holds a whole weight, y comes out whole, and the compiled forward holds the
    solver's collectives for the block (one all-reduce of y)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from tpviz.core import compiled
    from tpviz.core.exercises import mesh_1d

    specs = call(fn, what="your shardings function")
    if not isinstance(specs, dict) or set(specs) != set(KEYS):
        raise Wrong(f"return a dict with the keys {KEYS}, each a PartitionSpec.")
    if not all(isinstance(specs[k], P) for k in KEYS):
        raise Wrong("each value should be a jax.sharding.PartitionSpec, such as P(None, 'X').")
    r = RUN
    mesh = mesh_1d(r["devices"], "X")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((r["batch"], r["hidden"])).astype(np.float32)
    w1 = (rng.standard_normal((r["hidden"], r["ffn"])) / 16).astype(np.float32)
    w2 = (rng.standard_normal((r["ffn"], r["hidden"])) / 32).astype(np.float32)
    put = {k: NamedSharding(mesh, specs[k]) for k in KEYS}
    try:
        args = [jax.device_put(a, put[k]) for a, k in ((x, "x"), (w1, "w1"), (w2, "w2"))]
    except ValueError as e:
        raise Wrong(f"a sharding does not fit its array: {e}") from None
    hint = "Split W1 by columns and W2 by rows, and let the gelu keep W1's output layout."
    for name, a in (("W1", args[1]), ("W2", args[2])):
        shard = a.addressable_shards[0].data.shape
        if shard == a.shape:
            raise Wrong(f"every device holds the whole {name} ({a.nbytes:,} bytes): the "
                        "solver's plan splits both weights over the 8 devices.", hint)

    def block(x, w1, w2):
        h = jax.lax.with_sharding_constraint(jax.nn.gelu(x @ w1), put["h"])
        return jax.lax.with_sharding_constraint(h @ w2, put["y"])

    prog = jax.jit(block)
    y = call(prog, *args, what="the block with your shardings")
    expect_array(y, np.asarray(jax.nn.gelu(x @ w1) @ w2), what="y", rtol=1e-4, atol=1e-5)
    if not y.sharding.is_fully_replicated:
        raise Wrong("right values, but y comes out split; the next block wants it whole on "
                    "every device.", hint)
    found = compiled.collectives(prog, *args)
    want = planned().collectives
    got_list, want_list = [(c.kind, c.bytes) for c in found], [(c.kind, c.bytes) for c in want]
    if got_list == want_list:
        return f"the compiled forward holds the solver's {want_list}: Megatron's g."
    kinds = dict(found.kinds())
    if "all-gather" in kinds:
        raise Wrong(f"right values, but the program gathers ({got_list}); the plan has only "
                    f"{want_list}.", hint)
    if "all-to-all" in kinds:
        raise Wrong(f"right values, but the hidden layer changes layout between the matmuls "
                    f"(an all-to-all: {got_list}); the plan has only {want_list}.", hint)
    raise Wrong(f"right values, but the compiled collectives are {got_list} (kind, bytes); the "
                f"plan's are {want_list}.", hint)
