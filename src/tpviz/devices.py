"""Choose the devices a notebook or test runs on, and build meshes over them.

``setup_devices(n)`` is the first call of every notebook: real accelerators when at least ``n``
are present, else ``n`` emulated CPU devices (XLA's host platform split into ``n`` devices).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from contextlib import contextmanager

import jax
from jax.sharding import AxisType, Mesh

from tpviz import compat, distributed
from tpviz.core import validate
from tpviz.core.host_memory import refuse_beyond_memory
from tpviz.core.kinds import Index
from tpviz.core.public import public
from tpviz.errors import DeviceSetupError, ShardingError

_chosen: list = []  # the devices setup_devices picked; make_mesh uses them by default
# XLA's host platform starts 2,048 emulated devices in about 2 s and 4,096 in about 9 s (0.6 GB)
# on a 2-core machine; 8,192 take about 47 s and 1 GB, and 100,000 exhaust memory.
MAX_CPU_DEVICES = 4096


def _has_accelerators_env() -> bool:
    """Whether JAX may find a GPU or TPU (checked without starting a backend)."""
    import importlib.util

    return any(importlib.util.find_spec(m) is not None
               for m in ("jax_cuda12_plugin", "jax_cuda13_plugin", "libtpu", "jax_rocm60_plugin"))


def _describe(devices: Sequence) -> str:
    kind = devices[0].device_kind
    return f"{len(devices)} {devices[0].platform.upper()} devices ({kind})"


def _names(devices: Sequence) -> str:
    """``"tpu:0"``, ``"gpu:0, gpu:1"`` or ``"gpu:0 … gpu:3"``: the same on every JAX version."""
    names = [compat.device_name(d) for d in devices]
    return ", ".join(names) if len(names) <= 2 else f"{names[0]} … {names[-1]}"


def _fallback_line(n: int, accelerators: Sequence) -> str:
    """What setup_devices prints when it emulates ``n`` CPU devices, e.g. on Colab's TPU runtime:
    ``tpviz: using 8 emulated CPU devices; this runtime's 1 TPU (tpu:0, TPU v6 lite) is fewer
    than the 8 asked for.``"""
    line = f"tpviz: using {n} emulated CPU devices"
    if accelerators:
        first = accelerators[0]
        plural = "s" if len(accelerators) > 1 else ""
        line += (f"; this runtime's {len(accelerators)} {first.platform.upper()}{plural} "
                 f"({_names(accelerators)}, {first.device_kind}) "
                 f"{'is' if len(accelerators) == 1 else 'are'} fewer than the {n} asked for")
    return line + "."


@public(error=DeviceSetupError)
def setup_devices(n: int = 8, *, processes: int | str | None = None,
                  process_id: Index | None = None,
                  coordinator: str | None = None, timeout: float = 120.0,
                  verbose: bool = True) -> list:
    """Make ``n`` devices available and return them.

    Uses real accelerators (GPU or TPU) when at least ``n`` are present; otherwise ``n`` emulated
    CPU devices, also on a GPU/TPU runtime with fewer than ``n`` chips. Call it before any JAX
    computation runs: importing ``jax`` first is fine, computing something is not.

    Several processes (a multi-host TPU slice, GPU nodes, or ``python -m tpviz.cluster`` on one
    machine): given ``processes`` and ``process_id`` (or ``TPVIZ_PROCESSES`` and
    ``TPVIZ_PROCESS_ID`` in the environment, or a SLURM or Open MPI job; on a Cloud TPU slice
    ``processes="auto"``), it joins the processes with ``jax.distributed.initialize`` and
    returns all ``n`` devices of all processes, so that meshes span them (see
    :mod:`tpviz.distributed`). On CPU
    each process emulates ``n / processes`` devices. To try it on one machine, run
    ``setup_devices(8, processes=2, process_id=0)`` in one terminal and ``process_id=1`` in
    another.

    Args:
        n: how many devices the notebook needs (in all processes together).
        processes: how many processes take part; default: one, unless a launcher says more;
            "auto": as many as JAX's cluster detection finds (a multi-host TPU slice).
        process_id: this process's number, 0 to ``processes - 1``.
        coordinator: process 0's "host:port" (default ``tpviz.distributed.LOOPBACK``).
        timeout: seconds to wait for the coordinator and the other processes.
        verbose: print one line saying which devices were chosen.

    Returns:
        The list of ``n`` devices chosen (``jax.Device`` objects).

    Raises:
        DeviceSetupError: ``n`` is not a positive integer, or JAX already started with a
            different device set (restart the kernel and call this first); with several
            processes also: the coordinator not reached in ``timeout`` seconds, processes that
            ask for different device counts, or a second call in the same process.
    """
    n = validate.integer("setup_devices: n", n, fix="For example tpviz.setup_devices(8).",
                         error=DeviceSetupError)
    distributed.refuse_second_call()
    launch = distributed.requested(processes, process_id, coordinator)
    if launch is not None:
        timeout = validate.number("setup_devices: timeout", timeout, positive=True,
                                  error=DeviceSetupError)
        distributed.initialize(launch, n, not _has_accelerators_env(), timeout)
    if launch is not None or compat.distributed_started():
        return _global_devices(n, verbose)
    if not compat.backends_started():
        if n > MAX_CPU_DEVICES and not _has_accelerators_env():
            raise DeviceSetupError(
                f"setup_devices({n:,}): at most {MAX_CPU_DEVICES:,} emulated CPU devices can be "
                "made on a machine without accelerators (more take minutes and gigabytes). "
                "Plans need no devices: use the plan functions for larger counts.")
        if not _has_accelerators_env():
            refuse_beyond_memory(n)
        compat.ask_for_cpu_devices(n)
    accelerators = [d for d in jax.devices() if d.platform != "cpu"]
    if n > MAX_CPU_DEVICES and len(accelerators) < n:
        raise DeviceSetupError(f"setup_devices({n:,}): only {len(accelerators)} accelerators, and "
                               f"at most {MAX_CPU_DEVICES:,} emulated CPU devices can be made.")
    cpus = jax.devices("cpu")
    if len(accelerators) >= n:
        chosen, line = accelerators[:n], f"tpviz: using {_describe(accelerators[:n])}."
    elif len(cpus) >= n:
        chosen, line = cpus[:n], _fallback_line(n, accelerators)
        if accelerators:  # computations outside a mesh go to the CPU too, not the accelerator
            jax.config.update("jax_default_device", chosen[0])
    else:
        raise DeviceSetupError(
            f"setup_devices({n}): JAX has already started with {len(cpus)} CPU device(s) and "
            f"{len(accelerators)} accelerator(s), and the number of emulated devices can no longer "
            f"change. Restart the kernel (Kernel > Restart) and run `tpviz.setup_devices({n})` "
            "before any other JAX code."
        )
    _chosen[:] = chosen
    if verbose:
        print(line)
    return list(chosen)


def _global_devices(n: int, verbose: bool) -> list:
    """Every process's devices, after ``jax.distributed.initialize``; each process must bring
    the same number, ``n`` in all."""
    found = jax.devices()
    accelerators = [d for d in found if d.platform != "cpu"]
    chosen = accelerators or found
    per = Counter(d.process_index for d in chosen)
    if len(set(per.values())) > 1 or len(chosen) != n:
        counts = ", ".join(f"process {p}: {k}" for p, k in sorted(per.items()))
        raise DeviceSetupError(
            f"setup_devices({n}) across {jax.process_count()} processes: they hold "
            f"{len(chosen)} {chosen[0].platform.upper()} devices ({counts}). A multi-process run "
            f"uses every device and each process must bring the same number: call "
            f"setup_devices({len(chosen)}) if the counts are equal, else give every host the "
            "same devices.")
    _chosen[:] = chosen
    if verbose:
        print(f"tpviz: process {jax.process_index()} of {jax.process_count()}; using "
              f"{_describe(chosen)}, {per[jax.process_index()]} in each process "
              f"({_names(chosen)}).")
    return list(chosen)


def local_device():
    """A device of :func:`chosen_devices` that this process holds: where a single-device
    reference runs (with several processes, ``chosen_devices()[0]`` may be another process's)."""
    mine = {d.id for d in jax.local_devices()}
    return next((d for d in chosen_devices() if d.id in mine), jax.local_devices()[0])


def spread(devices: Sequence) -> list:
    """``devices`` taken from each process in turn (process 0's first, process 1's first, ...,
    then the second of each): any ``k`` of the result span ``min(k, processes)`` processes, so
    a mesh of fewer devices than the cluster still crosses processes. One process: unchanged."""
    by_process: dict[int, list] = {}
    for d in devices:
        by_process.setdefault(d.process_index, []).append(d)
    rounds = itertools.zip_longest(*by_process.values())
    return [d for group in rounds for d in group if d is not None]


@contextmanager
def using(devices: Sequence):
    """Within the ``with`` block, :func:`chosen_devices` returns ``devices`` (in that order);
    afterwards, what it returned before."""
    before = list(_chosen)
    _chosen[:] = list(devices)
    try:
        yield list(devices)
    finally:
        _chosen[:] = before


def chosen_devices() -> list:
    """The devices :func:`setup_devices` chose (all of ``jax.devices()`` if it was not called).

    Every mesh, checker and notebook takes its devices from here, never from ``jax.devices()``
    directly: on a runtime with one GPU, ``setup_devices(8)`` chooses 8 CPU devices while
    ``jax.devices()`` still lists the GPU.
    """
    return list(_chosen) or jax.devices()


@public
def make_mesh(
    shape: Sequence[int],
    axis_names: Sequence[str],
    devices: Sequence | None = None,
    *,
    axis_types: Sequence[AxisType] | None = None,
) -> Mesh:
    """A ``jax.sharding.Mesh`` of the given shape with explicit axis types.

    Args:
        shape: the size of each mesh axis, e.g. ``(2, 4)``.
        axis_names: one name per axis, e.g. ``("X", "Y")``.
        devices: the devices to arrange; default: those chosen by :func:`setup_devices`
            (or all of ``jax.devices()``). Their number must equal the product of ``shape``.
        axis_types: default ``AxisType.Auto`` for every axis (the compiler may choose shardings
            inside ``jax.jit``); pass ``AxisType.Explicit`` for sharding-in-types.

    Raises:
        ShardingError: shape and names differ in length, a name repeats, or the number of
            devices does not equal the mesh size.
    """
    if isinstance(axis_names, str):
        raise ShardingError(
            f"make_mesh: axis_names={axis_names!r} is a string, which would name one axis per "
            f"letter; give a tuple of names, e.g. ({axis_names!r},).")
    shape, axis_names = tuple(shape), tuple(axis_names)
    if len(shape) != len(axis_names):
        raise ShardingError(
            f"make_mesh: shape {shape} has {len(shape)} axes but axis_names {axis_names} has "
            f"{len(axis_names)}; give one name per axis."
        )
    if len(set(axis_names)) != len(axis_names):
        raise ShardingError(f"make_mesh: axis_names {axis_names} repeat a name; use distinct ones.")
    shape = tuple(validate.integer(f"make_mesh: shape[{i}]", s) for i, s in enumerate(shape))
    if devices is None:
        devices = chosen_devices()
    size = math.prod(shape)
    if size > len(devices):
        cpus = len(jax.devices("cpu")) if compat.backends_started() else 0
        fix = (f"Call tpviz.setup_devices({size}) again (no restart needed: JAX already has "
               f"{cpus} CPU devices)" if cpus >= size else
               f"Restart the kernel and call tpviz.setup_devices({size}) first")
        raise ShardingError(
            f"make_mesh: a mesh of shape {shape} needs {size} devices but only {len(devices)} are "
            f"available. {fix}, or use a smaller mesh."
        )
    if size < len(devices):
        raise ShardingError(
            f"make_mesh: a mesh of shape {shape} uses {size} devices but {len(devices)} were given;"
            " "
            f"pass devices=devices[:{size}] to use a subset, or choose a mesh that uses them all."
        )
    if axis_types is None:
        axis_types = (AxisType.Auto,) * len(shape)
    return jax.make_mesh(shape, axis_names, axis_types=tuple(axis_types), devices=list(devices))
