"""Collectives across processes against NumPy: psum_scatter, all-gather, all-to-all, psum.

Run it on several processes (``python -m tpviz.cluster --processes 2 --script
path/to/sanity.py``); every process checks every result, gathered, against the same
computation in NumPy and raises :class:`~tpviz.errors.CheckFailed` at the first wrong value.
The reduce-scatters include large chunks (4 MiB per device, groups of 2 that cross processes
and groups inside one) and run several times: JAX issue 40830 reports ``psum_scatter`` on CPU
with gloo under ``jax.distributed`` returning wrong values at the end of rank 0's chunk,
intermittently, with chunks of 4 MiB. :func:`first_wrong` is the comparison; its own test
feeds it such a fault.
"""

from __future__ import annotations

import sys

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz.core import verify
from tpviz.errors import CheckFailed


def first_wrong(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Raise CheckFailed naming the first wrong element and how many are wrong, if any."""
    wrong = ~np.isclose(got, want, rtol=1e-5, atol=1e-5)
    if got.shape != want.shape:
        raise CheckFailed(f"{what}: shape {got.shape}, expected {want.shape}")
    if wrong.any():
        first = tuple(int(i) for i in np.argwhere(wrong)[0])
        raise CheckFailed(f"{what}: {int(wrong.sum())} of {wrong.size} elements wrong, the "
                          f"first at {first}: {got[first]!r} instead of {want[first]!r}")


def _run(mesh, body, spec_in, spec_out, x):
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec_in, out_specs=spec_out))
    return verify.host(fn(x), np.float32)


def check(iterations: int = 3, chunk: int = 1 << 20) -> list[str]:
    """Run the collectives on the devices ``setup_devices`` chose and check every result;
    return one line per collective. ``chunk``: float32 elements each device keeps of a
    reduce-scatter (default 2^20, 4 MiB)."""
    devices = tpviz.devices.chosen_devices()
    n = len(devices)
    done = []
    # pairs: (i, i + n/2) on a mesh ("pair" major): with devices in process order, each pair
    # crosses processes; "row" pairs neighbours, inside one process
    for names, axis, where in ((("pair", "rest"), "pair", "across processes"),
                               (("rest", "pair"), "pair", "inside a process")):
        shape = (2, n // 2) if names[0] == "pair" else (n // 2, 2)
        mesh = tpviz.make_mesh(shape, names)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((n, 2 * chunk), dtype=np.float32)  # one row per device
        spec = P(names)
        # device at mesh position (a, b) holds row a * shape[1] + b
        rows = x.reshape(*shape, 2, chunk)
        summed = rows.sum(axis=names.index(axis), keepdims=True)
        want = np.broadcast_to(summed, rows.shape)  # [.., .., 2 halves, chunk]
        rank = np.indices(shape)[names.index(axis)]  # each device's place in its pair
        want = np.take_along_axis(want, rank[..., None, None], axis=2)[..., 0, :]
        want = want.reshape(n, chunk)
        for i in range(iterations):
            got = _run(mesh, lambda a, axis=axis: jax.lax.psum_scatter(
                a[0], axis, tiled=True)[None], spec, spec, x)
            first_wrong(got, want, f"psum_scatter {where}, 4 MiB chunks, iteration {i}")
        done.append(f"psum_scatter {where}: {iterations} x {n} chunks of "
                    f"{chunk * 4 // 2**20} MiB right")
    mesh = tpviz.make_mesh((n,), ("X",))
    x = np.random.default_rng(1).standard_normal((n, 4 * n), dtype=np.float32)
    got = _run(mesh, lambda a: jax.lax.all_gather(a, "X", tiled=True)[None], P("X"), P("X"), x)
    first_wrong(got.reshape(n, n, 4 * n), np.broadcast_to(x, (n, n, 4 * n)), "all_gather")
    done.append(f"all_gather over {n} devices right")
    got = _run(mesh, lambda a: jax.lax.all_to_all(a.reshape(n, 4), "X", 0, 0, tiled=True)
               .reshape(1, 4 * n), P("X"), P("X"), x)
    first_wrong(got, x.reshape(n, n, 4).transpose(1, 0, 2).reshape(n, 4 * n), "all_to_all")
    done.append(f"all_to_all over {n} devices right")
    got = _run(mesh, lambda a: jax.lax.psum(a, "X"), P("X"), P(), x)
    first_wrong(got, x.sum(0, keepdims=True), "psum")
    done.append(f"psum over {n} devices right")
    return done


def main() -> int:
    tpviz.setup_devices(8)
    for line in check():
        print(f"ok {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
