"""One process of a ``python -m tpviz.cluster`` run: set up the devices, run the topics' checks,
write what each measured. XLA compiles with :data:`FAST_COMPILE` (see ``main``).

``python -m tpviz.cluster.worker --devices 8 --out DIR --topics layouts,matmul`` runs in one
process; with ``TPVIZ_PROCESSES``, ``TPVIZ_PROCESS_ID`` and ``TPVIZ_COORDINATOR`` in its
environment (the launcher sets them) it is one of several, and ``--devices`` counts them all.
For each topic it writes ``DIR/<topic>.json`` (the digest, seconds, the error if the check
failed) and ``DIR/<topic>.npz`` (the values compared), and prints ``done <topic> <seconds>``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

FAST_COMPILE = "--xla_backend_optimization_level=0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpviz.cluster.worker")
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    # XLA's CPU code generation without LLVM's optimisations: compiles in about half the CPU
    # time. It acts after the HLO passes that place collectives and plan buffers, so the
    # collectives and memory analyses compared are the ones the book's programs get; both
    # runs (one process and several) use it, so their values are compared like for like.
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()

    import tpviz
    from tpviz.cluster import compare, topics
    from tpviz.errors import describe

    tpviz.setup_devices(args.devices, timeout=args.timeout)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    names = args.topics.split(",")
    for k, topic in enumerate(names, start=1):
        start, cpu = time.perf_counter(), time.process_time()
        try:
            found, values = topics.run(topic)
            record, error = compare.digest(found), ""
        except Exception as e:  # a check that fails: reported, and the next topic runs
            found, values, record, error = {}, [], None, describe(e)
            failed += 1
        seconds = time.perf_counter() - start
        np.savez(args.out / f"{topic}.npz", *values)
        (args.out / f"{topic}.json").write_text(json.dumps(
            {"digest": record, "error": error, "seconds": seconds,
             "cpu_seconds": time.process_time() - cpu}))
        print(f"{'failed' if error else 'done'} {topic} ({k} of {len(names)}): {seconds:.1f} s, "
              f"{time.process_time() - cpu:.1f} s of CPU", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
