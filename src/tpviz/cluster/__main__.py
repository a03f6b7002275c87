"""``python -m tpviz.cluster``: the book's checks across processes, or a script on several.

    python -m tpviz.cluster --processes 2 --devices-per-process 4
    python -m tpviz.cluster --processes 2 --topics matmul,moe
    python -m tpviz.cluster --processes 2 --script my_script.py [its arguments]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

from tpviz.cluster.checks import TOPICS, run_checks
from tpviz.cluster.script import run_script
from tpviz.core.host_memory import refuse_beyond_memory
from tpviz.errors import DeviceSetupError, WorkerError

MAX_PROCESSES = 64  # on one machine (loopback); each process imports JAX
BOOK_DEVICES = 8  # the chapters' checks are written for 8 devices


def _topics(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in names if t not in TOPICS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown topic(s) {unknown}; choose from "
                                         f"{', '.join(TOPICS)}")
    return names


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_PROCESSES * BOOK_DEVICES:
        raise argparse.ArgumentTypeError(f"{value} is not from 1 to {MAX_PROCESSES * BOOK_DEVICES}")
    return value


def _sizes(parser, args) -> None:
    """Refuse what would start too many processes, or checks on another device count."""
    if args.processes > MAX_PROCESSES:
        parser.error(f"--processes {args.processes}: at most {MAX_PROCESSES} on one machine "
                     "(each process starts JAX)")
    if args.script is not None:
        path = Path(args.script)
        if not args.script.strip():
            parser.error("--script '': give the path of a Python script to run")
        if not path.is_file():
            parser.error(f"--script {args.script}: no such file")
        return
    devices = args.processes * args.devices_per_process
    if devices != BOOK_DEVICES:
        parser.error(f"--processes {args.processes} x --devices-per-process "
                     f"{args.devices_per_process} = {devices} devices; the chapters' checks "
                     f"run on the book's {BOOK_DEVICES} (e.g. 2 x 4, 4 x 2, 8 x 1)")
    try:
        refuse_beyond_memory(args.devices_per_process)
    except DeviceSetupError as e:
        parser.error(str(e))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tpviz.cluster",
        description="Run every topic's check in one process and across processes on this "
                    "machine (loopback), and say per topic whether they are equal.")
    parser.add_argument("--processes", type=_count, default=2,
                        help=f"processes (default 2, at most {MAX_PROCESSES})")
    parser.add_argument("--devices-per-process", type=_count, default=4,
                        help="emulated CPU devices in each process (default 4)")
    parser.add_argument("--topics", type=_topics, default=TOPICS,
                        help=f"comma-separated, default all: {','.join(TOPICS)}")
    parser.add_argument("--timeout", type=_seconds, default=900.0,
                        help="seconds before every process is stopped (default 900)")
    parser.add_argument("--script", help="run this Python script in every process instead")
    args, rest = parser.parse_known_args(argv)
    if rest and args.script is None:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    _sizes(parser, args)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        if args.script is not None:
            run_script(args.script, rest, args.processes, args.timeout,
                       out=lambda line: print(line, flush=True))
            return 0
        say(f"tpviz.cluster: {len(args.topics)} topics in one process of "
            f"{args.processes * args.devices_per_process} devices and in {args.processes} "
            f"processes of {args.devices_per_process} (loopback, gloo)...")
        start = time.perf_counter()
        verdicts = run_checks(args.processes, args.devices_per_process, args.topics,
                              args.timeout, progress=say)
    except WorkerError as e:
        print(f"tpviz.cluster: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 2
    for v in verdicts:
        print(v.line(), flush=True)
    same = sum(v.equal for v in verdicts)
    cpu = sum(v.cpu_seconds for v in verdicts)
    say(f"tpviz.cluster: {same} of {len(verdicts)} topics match the single-process run "
        f"({time.perf_counter() - start:.0f} s in all; the checks took {cpu:.0f} s of CPU in "
        f"process 0; load average now {os.getloadavg()[0]:.1f}).")
    return 0 if same == len(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
