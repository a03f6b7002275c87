"""Several processes, one mesh: ``jax.distributed`` for :func:`tpviz.setup_devices`.

On a cluster JAX runs one process per host (a multi-host TPU slice) or per node (GPU nodes), and
every process runs the same program; together they see every device, and a mesh spans them.
``setup_devices(n)`` turns multi-process when it is told how (first match wins):

1. arguments: ``setup_devices(8, processes=2, process_id=0, coordinator="host:port")``
   (``coordinator`` defaults to :data:`LOOPBACK`, for trying it on one machine);
2. the environment a launcher sets: ``TPVIZ_PROCESSES``, ``TPVIZ_PROCESS_ID`` and
   ``TPVIZ_COORDINATOR`` (``python -m tpviz.cluster`` sets them);
3. JAX's own cluster detection finding more than one process: by itself under SLURM, Open MPI
   and TPUs on GKE (environment variables only); on Cloud TPU VMs and Kubernetes (which need
   the network) when asked, ``processes="auto"`` or ``TPVIZ_PROCESSES=auto``. JAX then chooses
   the coordinator, the count and this process's id.

Before JAX connects (where the coordinator is known), the processes shake hands on the
coordinator's port: process 0 waits for every other one, each says how many devices it wants,
and a coordinator nobody answers, a missing process or different device counts become a
:class:`~tpviz.errors.DeviceSetupError` after ``timeout`` seconds, not a crash inside JAX
(whose client aborts the process when its deadline passes).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

from tpviz import compat
from tpviz.core import validate
from tpviz.errors import DeviceSetupError

LOOPBACK = "127.0.0.1:9476"  # the default coordinator: this machine only
ENV = {"processes": "TPVIZ_PROCESSES", "process_id": "TPVIZ_PROCESS_ID",
       "coordinator": "TPVIZ_COORDINATOR"}
_started: list = []  # the Launch this process initialized (at most one)


@dataclass(frozen=True)
class Launch:
    """How this process joins the others: ``coordinator`` "host:port" (None: JAX detects it),
    ``processes`` and ``process_id`` (None: JAX detects them), and where this came from."""

    coordinator: str | None
    processes: int | None
    process_id: int | None
    source: str


def requested(processes=None, process_id=None, coordinator=None) -> Launch | None:
    """The multi-process launch asked for by the arguments, the environment or JAX's cluster
    detection (in that order); None for one process.

    Raises:
        DeviceSetupError: a count or id that is not an integer in range.
    """
    if processes == "auto" or (processes is None and os.environ.get(ENV["processes"]) == "auto"):
        return Launch(coordinator, None, None, "JAX's cluster detection (processes='auto')")
    if processes is None and process_id is None and coordinator is None:
        env = {k: os.environ.get(v) for k, v in ENV.items()}
        if env["processes"] is None:
            found = compat.cluster_environment()
            if found is None or found[1] < 2:  # no cluster, or one of a single process
                return None
            name, count, rank = found
            return Launch(None, count, rank, f"JAX's cluster detection ({name})")
        processes, process_id, coordinator = env["processes"], env["process_id"], env["coordinator"]
        source = "the environment (" + ", ".join(v for v in ENV.values() if v in os.environ) + ")"
    else:
        source = "the arguments"
    fix = ("For example setup_devices(8, processes=2, process_id=0) in one process and "
           "process_id=1 in the other.")
    processes = _int("processes", processes, 1, None, fix)
    if process_id is None:
        raise DeviceSetupError(f"setup_devices: processes={processes} needs process_id, this "
                               f"process's number from 0 to {processes - 1}. {fix}")
    process_id = _int("process_id", process_id, 0, processes - 1, fix)
    _address(coordinator or LOOPBACK)  # "host:port", or a clear error now
    return Launch(coordinator or LOOPBACK, processes, process_id, source)


def _int(name, value, low, high, fix):
    if isinstance(value, str):
        value = int(value) if value.strip().lstrip("-").isdigit() else value
    return validate.integer(f"setup_devices: {name}", value, minimum=low, maximum=high,
                            fix=fix, error=DeviceSetupError)


def started() -> Launch | None:
    """The launch this process initialized, or None."""
    return _started[0] if _started else None


def _address(coordinator: str) -> tuple[str, int]:
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit():
        raise DeviceSetupError(f"setup_devices: coordinator={coordinator!r} is not 'host:port'; "
                               f"for one machine use {LOOPBACK!r}.")
    return host.strip("[]"), int(port)


def handshake(launch: Launch, devices: int, timeout: float) -> None:
    """Meet every process on the coordinator's port before JAX does; all must ask for the same
    ``devices``.

    Raises:
        DeviceSetupError: no coordinator within ``timeout`` seconds, a process missing, two
            processes with one id, or different device counts.
    """
    host, port = _address(launch.coordinator)
    me = {"process_id": launch.process_id, "processes": launch.processes, "devices": devices}
    if launch.process_id == 0:
        reply = _gather(port, launch, me, timeout)
    else:
        reply = _join(host, port, me, timeout)
    if reply.get("error"):
        raise DeviceSetupError(f"setup_devices (process {launch.process_id} of "
                               f"{launch.processes}): {reply['error']}")


def _gather(port: int, launch: Launch, me: dict, timeout: float) -> dict:
    """Process 0: accept the others, check they agree, answer each."""
    deadline = time.monotonic() + timeout
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("", port))
    except OSError as e:
        server.close()
        raise DeviceSetupError(f"setup_devices (process 0, the coordinator): cannot listen on "
                               f"port {port} ({e.strerror}); another program uses it. Choose "
                               "another port in coordinator='host:port'.") from None
    server.listen(launch.processes)
    peers, said = [], {0: me}
    try:
        while len(said) < launch.processes:
            server.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                conn, _ = server.accept()
            except TimeoutError:
                missing = sorted(set(range(launch.processes)) - set(said))
                raise DeviceSetupError(
                    f"setup_devices (process 0, the coordinator on port {port}): after "
                    f"{timeout:g} s, process(es) {missing} of {launch.processes} have not "
                    "connected. Start every process with the same coordinator address, or "
                    "give them more time (timeout=).") from None
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            message = json.loads(conn.makefile().readline() or "{}")
            peers.append(conn)
            said.setdefault(message.get("process_id"), message)
        error = _disagreement(said, launch.processes)
        for conn in peers:
            conn.sendall((json.dumps({"error": error}) + "\n").encode())
            conn.recv(1)  # wait for the peer to close first: the port is free again at once
        return {"error": error}
    finally:
        for conn in peers:
            conn.close()
        server.close()


def _disagreement(said: dict, processes: int) -> str:
    ids = sorted(k for k in said if isinstance(k, int))
    if ids != list(range(processes)):
        return (f"the processes that connected have ids {ids}, not 0 to {processes - 1} "
                "(two started with one process_id?)")
    counts = {i: (m.get("processes"), m.get("devices")) for i, m in said.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"process {i}: setup_devices({d}, processes={p})"
                          for i, (p, d) in sorted(counts.items()))
        return (f"the processes ask for different device counts ({shown}); every process must "
                "call setup_devices with the same n and processes.")
    return ""


def _join(host: str, port: int, me: dict, timeout: float) -> dict:
    """Every other process: connect to process 0 (retrying until ``timeout``) and say hello."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0) as conn:
                conn.sendall((json.dumps(me) + "\n").encode())
                conn.settimeout(max(0.01, deadline - time.monotonic()))
                return json.loads(conn.makefile().readline() or '{"error": "no answer"}')
        except (OSError, ValueError) as e:
            last = e
            time.sleep(0.2)
    raise DeviceSetupError(
        f"setup_devices (process {me['process_id']} of {me['processes']}): the coordinator "
        f"{host}:{port} could not be reached in {timeout:g} s ({describe_os(last)}). Start "
        "process 0 first, check the address, or give it more time (timeout=).")


def describe_os(e) -> str:
    if e is None:
        return "no attempt"
    return getattr(e, "strerror", None) or type(e).__name__


def refuse_second_call() -> None:
    """Raise if this process already joined others through setup_devices.

    Raises:
        DeviceSetupError: always, once :func:`initialize` has run.
    """
    if _started:
        launch = _started[0]
        raise DeviceSetupError(
            f"setup_devices was already called in this process (process {launch.process_id} of "
            f"{launch.processes}, from {launch.source}), and jax.distributed can be initialized "
            "only once per process. Use the devices the first call returned, or "
            "tpviz.devices.chosen_devices().")


def initialize(launch: Launch, devices: int, cpu: bool, timeout: float) -> None:
    """Join the processes (``jax.distributed.initialize``), after the handshake.

    ``cpu``: emulate ``devices / processes`` CPU devices per process, with collectives between
    processes over gloo.

    Raises:
        DeviceSetupError: called a second time, JAX already started, or the handshake failed.
    """
    refuse_second_call()
    if compat.distributed_started():
        raise DeviceSetupError(
            "setup_devices: jax.distributed is already initialized in this process (by a call "
            "of jax.distributed.initialize); call setup_devices(n) without processes, "
            "process_id or coordinator to use its devices.")
    if compat.backends_started():
        raise DeviceSetupError(
            "setup_devices: JAX has already started in this process, and joining other "
            "processes must come first. Call tpviz.setup_devices(...) before any other JAX code "
            "(restart the kernel or the script).")
    if launch.processes is not None and cpu and devices % launch.processes:
        raise DeviceSetupError(
            f"setup_devices({devices}, processes={launch.processes}): {devices} emulated CPU "
            f"devices do not split evenly over {launch.processes} processes; ask for a multiple "
            f"of {launch.processes}.")
    if launch.coordinator is not None and launch.processes is not None:
        handshake(launch, devices, timeout)
    if cpu:
        compat.use_gloo()
        if launch.processes is not None:
            compat.ask_for_cpu_devices(devices // launch.processes)
    try:
        compat.start_distributed(launch.coordinator, launch.processes, launch.process_id,
                                 max(1, int(timeout)))
    except ValueError as e:  # "auto" where JAX's detection finds no cluster
        raise DeviceSetupError(
            f"setup_devices (from {launch.source}): JAX found no cluster to join ({e}). Pass "
            "processes=, process_id= and coordinator= instead.") from None
    _started[:] = [launch]
