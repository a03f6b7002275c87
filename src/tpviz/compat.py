"""Spellings that differ between the JAX and ipywidgets versions tpviz supports.

Every version difference lives here, each with the versions it bridges; the rest of the library
and the book call these names. Supported (DESIGN.md, "Where it runs"): JAX 0.7.2 (Colab's) to
the newest, ipywidgets 7.7.1 (Colab's) and 8.x, Python 3.11-3.13.
"""

from __future__ import annotations

import inspect
import os

import jax

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())


def versions() -> str:
    """The JAX this kernel found, e.g. ``"JAX 0.7.2 (jaxlib 0.7.2)"``, for the install cell.
    Reads versions only: starts no backend (``setup_devices`` must still come first)."""
    import jaxlib

    return f"JAX {jax.__version__} (jaxlib {jaxlib.__version__})"


# --- JAX ------------------------------------------------------------------------------------

# JAX 0.6.2-0.8.1 (0.7.2 on Colab): all_gather has no `to` argument, the invariant variant is its
# own function; later (0.10.2 to 0.12 checked): all_gather(..., to="invarying"), no such function.
_ALL_GATHER_HAS_TO = "to" in inspect.signature(jax.lax.all_gather).parameters


def all_gather_invariant(x, axis_name, *, axis: int = 0, tiled: bool = False):
    """All-gather whose result has the same value on every device of the group (type
    *invariant* over ``axis_name`` under ``check_vma``), so it can leave ``shard_map`` through
    an ``out_specs`` that does not mention the axis.

    JAX 0.6.2-0.8.1: ``jax.lax.all_gather_invariant``; later: ``all_gather(..., to="invarying")``.
    """
    if _ALL_GATHER_HAS_TO:
        return jax.lax.all_gather(x, axis_name, axis=axis, tiled=tiled, to="invarying")
    return jax.lax.all_gather_invariant(x, axis_name, axis=axis, tiled=tiled)


def pvary(x, axis_name):
    """Mark ``x`` as *varying* over ``axis_name`` (no data moves; its type changes under
    ``check_vma``), e.g. before adding it to a value that already varies.

    JAX 0.7.2 (Colab's) has ``jax.lax.pvary(x, axis_name)`` and no ``pcast``; JAX 0.10.2 to
    0.12 have ``jax.lax.pcast(x, axis_name, to="varying")`` and no ``pvary``.
    """
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, axis_name, to="varying")
    return jax.lax.pvary(x, axis_name)


def jax_make_mesh_axis_types(n: int = 1) -> tuple:
    """The axis types a learner's own ``jax.make_mesh`` call gives by default in this JAX: Auto
    up to 0.8 (0.7.2 on Colab), Explicit from 0.9 on. ``tpviz.make_mesh`` always defaults to
    Auto; read from a one-device mesh rather than from the version number."""
    one = jax.make_mesh((1,), ("a",), devices=jax.devices()[:1])
    return tuple(one.axis_types) * n


def mesh_context(mesh):
    """``with mesh_context(mesh):`` makes ``mesh`` the current mesh, so that a bare
    ``PartitionSpec`` names its axes (``jax.sharding.reshard(x, P(...))``). JAX 0.7.2 to the
    newest: ``jax.set_mesh``; older spellings: ``jax.sharding.use_mesh``."""
    if hasattr(jax, "set_mesh"):
        return jax.set_mesh(mesh)
    return jax.sharding.use_mesh(mesh)


def varying_axes(x) -> frozenset[str]:
    """The mesh axes over which ``x`` *varies* (its value may differ between devices), read
    from its type inside ``shard_map`` with ``check_vma=True``; empty for an invariant value.

    JAX 0.7.2 (Colab's): ``jax.typeof(x).vma``; JAX 0.10.2 to 0.12: ``jax.typeof(x)
    .manual_axis_type.varying`` (no ``vma`` attribute).
    """
    aval = jax.typeof(x)
    if hasattr(aval, "manual_axis_type"):
        return frozenset(aval.manual_axis_type.varying)
    return frozenset(aval.vma)


def backends_started() -> bool:
    """Whether JAX has started its backends (after which the CPU device count is fixed).

    No public API says so; ``jax._src.xla_bridge.backends_are_initialized`` exists in every JAX
    from 0.4.x to 0.12 (checked on 0.7.2, 0.10.2 and 0.12.0.1). Should it go, assume started:
    ``setup_devices`` then uses the devices that exist and says to restart if too few.
    """
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return True


def ask_for_cpu_devices(n: int) -> None:
    """Ask XLA's CPU backend for ``n`` devices; only effective before any backend starts.

    Every supported JAX (0.7.2 on Colab to 0.12; checked on 0.7.2, 0.10.2 and 0.12.0.1) has the
    ``jax_num_cpu_devices`` option; older JAX (0.4.x) knew only the XLA flag
    ``--xla_force_host_platform_device_count``, kept as the fallback.
    """
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except AttributeError:  # older JAX: "Unrecognized config option"
        flags = os.environ.get("XLA_FLAGS", "")
        flag = f"--xla_force_host_platform_device_count={n}"
        os.environ["XLA_FLAGS"] = " ".join(
            [f for f in flags.split() if "host_platform_device_count" not in f] + [flag]
        )


def device_name(device) -> str:
    """A device's short name, ``"<platform>:<id>"`` (``"cpu:0"``, ``"tpu:3"``), on every JAX.

    ``str(device)`` is ``"TFRT_CPU_0"`` for a CPU device in JAX 0.7.2 (Colab's) and ``"cpu:0"`` in
    JAX 0.10 and later; ``repr(device)`` (``CpuDevice(id=0)``) differs by platform.
    """
    return f"{device.platform}:{device.id}"


# --- ipywidgets -----------------------------------------------------------------------------

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def widget_bundle(widget) -> dict:
    """The MIME bundle that makes a front end show ``widget``'s live view.

    ipywidgets 8 builds it in ``Widget._repr_mimebundle_``; ipywidgets 7 (7.7.1 on Colab) has no
    such method (it displays itself through ``_ipython_display_``), so build the same bundle:
    the widget-view message of the widget protocol version 2.0, pointing at the widget's model.
    """
    if hasattr(widget, "_repr_mimebundle_"):  # ipywidgets >= 8.0
        return dict(widget._repr_mimebundle_() or {})
    return {  # ipywidgets 7.x
        "text/plain": repr(widget)[:110],
        WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": widget.model_id},
    }


# --- PyTorch (optional; the newest environment has none) -----------------------------------

def torch_version() -> tuple[int, ...] | None:
    """The installed torch's (major, minor), without importing it; None without torch."""
    from importlib import metadata

    try:
        text = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None
    return tuple(int(p) for p in text.split("+")[0].split(".")[:2] if p.isdigit())


def torch_v_schedules_on_gloo() -> str | None:
    """Why ``ScheduleZBVZeroBubble`` and ``ScheduleDualPipeV`` cannot run on gloo processes
    with this torch, or None when they can. torch 2.11 (Colab's) sends between the two stages a
    rank holds in the V (stages p-1 and p on the last rank) through gloo, which has no pair to
    itself ("Pair is not connected"); torch 2.13 (pinned) passes them locally. 2.12: untested,
    treated as 2.11."""
    version = torch_version()
    if version is None or version >= (2, 13):
        return None
    return (f"torch {'.'.join(map(str, version))} sends between a rank's own V stages "
            "through gloo, which cannot reach itself; torch 2.13 runs them")


# --- several processes (jax.distributed) ------------------------------------------------------

# JAX's detectors that read only environment variables (no network, no warning); the others
# (GCE TPU VMs: the metadata server; Kubernetes: its API) run only when asked for "auto"
QUIET_CLUSTERS = ("SlurmCluster", "OmpiCluster", "GkeTpuCluster")


def cluster_environment() -> tuple[str, int, int] | None:
    """``(name, processes, process_id)`` of the cluster JAX's own detection finds among
    :data:`QUIET_CLUSTERS` (SLURM, Open MPI, TPUs on GKE), or None.

    No public API asks without initializing; ``jax._src.clusters.ClusterEnv._cluster_types`` and
    each type's ``is_env_present``, ``get_process_count`` and ``get_process_id`` exist in JAX
    0.7.2, 0.10.2 and 0.12.0.1 (checked). Should they go, None: pass the processes to
    setup_devices (or processes="auto").
    """
    try:
        from jax._src.clusters import ClusterEnv

        for env in ClusterEnv._cluster_types:
            if env.__name__ in QUIET_CLUSTERS and env.is_env_present():
                return env.__name__, int(env.get_process_count()), int(env.get_process_id())
    except Exception:  # private API moved, or a detector that fails outside its cluster
        return None
    return None


def distributed_started() -> bool:
    """Whether ``jax.distributed.initialize`` has run in this process (JAX 0.7.2 to 0.12:
    ``jax.distributed.is_initialized``)."""
    return bool(jax.distributed.is_initialized())


def use_gloo() -> None:
    """CPU collectives between processes over gloo (``jax_cpu_collectives_implementation``, in
    JAX 0.7.2 and 0.10.2); without it XLA's CPU backend cannot reach another process."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")


def start_distributed(coordinator, processes, process_id, timeout: int) -> None:
    """``jax.distributed.initialize`` with an ``initialization_timeout`` in seconds (the same
    keywords in JAX 0.7.2 and 0.10.2); None lets JAX's cluster detection choose."""
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=processes,
                               process_id=process_id, initialization_timeout=timeout)


def gather_to_host(x):
    """A ``jax.Array`` that spans processes as one NumPy array on every process
    (``jax.experimental.multihost_utils.process_allgather(x, tiled=True)``, JAX 0.7.2 to 0.12).
    Every process must call it, in the same order: it is a collective."""
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(x, tiled=True)
