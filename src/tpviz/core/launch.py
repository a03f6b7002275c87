"""Run a worker function on K local ``torch.distributed`` processes (gloo, CPU): the launcher
every PyTorch topic shares (chapter 1's DDP, chapter 13's pipelines, FSDP2 and DTensor).

:func:`launch` runs ``worker(rank, world, *args)`` on ``world`` processes that have joined one
gloo process group, and returns each worker's result, in rank order. A worker must be a
function defined at the top level of a module (a child process imports it by name). If a worker
raises, :func:`launch` raises :class:`~tpviz.errors.WorkerError` naming the worker and its
exception; if they do not all finish within ``timeout`` seconds (a rank that skipped a
collective leaves the others waiting for ever), :class:`~tpviz.errors.WorkerTimeout` names the
ones still running. Either way every worker process is stopped before it returns.

The processes start from a *forkserver*: a clean process that imports torch (with
``torch._dynamo``, which DDP and FSDP2 need), this module and the first worker's module once per
session, then forks each worker in milliseconds. The server exits with the Python process that
started it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queues
import shutil
import tempfile
import time
import traceback
from datetime import timedelta

from tpviz.errors import ArgumentError, ArgumentTypeError, WorkerError, WorkerTimeout

_context = None


def _forkserver(*modules: str):
    global _context
    if _context is None:
        _context = mp.get_context("forkserver")
        # DDP imports torch._dynamo on first use (seconds): import it once, in the server, with
        # the first worker's module (and what it imports: pipelining, FSDP2, DTensor)
        _context.set_forkserver_preload([__name__, "torch._dynamo", *modules])
    return _context


def warm(*modules: str) -> None:
    """Start the process server now, in the background, importing ``modules`` (the modules of
    the workers to come): its imports then overlap with the caller's work instead of delaying
    the first :func:`launch`. Does nothing once the server runs."""
    from multiprocessing import forkserver

    _forkserver(*modules)
    forkserver.ensure_running()


def _entry(worker, rank: int, world: int, store: str, args: tuple, out, timeout: float) -> None:
    import torch  # here, not at the top: warm() starts the server before the caller imports torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # K processes share the cores
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=timeout))
        out.put((rank, "ok", worker(rank, world, *args)))
    except BaseException as e:  # report everything, then let the parent stop the others
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        out.put((rank, "error", f"{type(e).__name__}: {first}", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(worker, world: int = 4, *args, timeout: float = 30.0) -> list:
    """Run ``worker(rank, world, *args)`` on ``world`` gloo processes; their results by rank.

    Raises:
        ArgumentTypeError: ``worker`` is not a function defined at a module's top level.
        ArgumentError: ``world`` < 1 or ``timeout`` <= 0.
        WorkerError: a worker raised (the message names it and its exception) or died.
        WorkerTimeout: not every worker finished within ``timeout`` seconds.
    """
    name = getattr(worker, "__qualname__", "")
    if not callable(worker) or not name or "<" in name or "." in name:
        raise ArgumentTypeError(f"launch(worker={worker!r}): the worker must be a function "
                                "defined at the top level of a module (not a lambda or a "
                                "nested function), so that each process can import it.")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ArgumentError(f"launch(world={world!r}): give the number of processes, >= 1.")
    if not timeout > 0:
        raise ArgumentError(f"launch(timeout={timeout!r}): give seconds > 0.")
    ctx = _forkserver(worker.__module__)
    folder = tempfile.mkdtemp(prefix="tpviz-gloo-")
    out = ctx.Queue()
    procs = [ctx.Process(target=_entry, name=f"tpviz worker {r}", daemon=True,
                         args=(worker, r, world, os.path.join(folder, "store"), args, out,
                               timeout)) for r in range(world)]
    results: dict[int, object] = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        while len(results) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                late = [r for r in range(world) if r not in results]
                raise WorkerTimeout(
                    f"{worker.__name__}: worker(s) {late} of {world} did not finish within "
                    f"{timeout:g} s and were stopped. A common cause is a deadlock: a rank "
                    "that skips a collective the others wait in.")
            try:
                rank, status, payload, *more = out.get(timeout=min(left, 0.1))
            except queues.Empty:
                _raise_if_dead(worker, procs, results)
                continue
            if status == "error":  # a peer's crash shows up as an error in the others:
                for _ in range(10):  # give a crashed peer half a second to be reported dead
                    _raise_if_dead(worker, procs, results, f"; worker {rank} then raised "
                                   f"{payload}")
                    time.sleep(0.05)
                raise WorkerError(f"{worker.__name__}: worker {rank} of {world} raised "
                                  f"{payload}\n\nIts traceback:\n{more[0]}")
            results[rank] = payload
    finally:
        for p in procs:
            if p.is_alive() and len(results) == world:
                p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
        out.close()
        out.join_thread()
        shutil.rmtree(folder, ignore_errors=True)
    return [results[r] for r in range(world)]


def _raise_if_dead(worker, procs, results: dict, then: str = "") -> None:
    for r, p in enumerate(procs):
        if r not in results and p.exitcode not in (None, 0):
            raise WorkerError(f"{worker.__name__}: worker {r} of {len(procs)} died (exit code "
                              f"{p.exitcode}) without a result{then}.")
