"""``python -m tpviz.cluster``: the book's checks across processes, or a script on several.

    python -m tpviz.cluster --processes 2 --devices-per-process 4
    python -m tpviz.cluster --processes 2 --topics matmul,moe
    python -m tpviz.cluster --processes 2 --script my_script.py [its arguments]
"""

from __future__ import annotations

import argparse
import sys
import time

from tpviz.cluster.checks import TOPICS, run_checks
from tpviz.cluster.script import run_script
from tpviz.errors import WorkerError


def _topics(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in names if t not in TOPICS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown topic(s) {unknown}; choose from "
                                         f"{', '.join(TOPICS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tpviz.cluster",
        description="Run every topic's check in one process and across processes on this "
                    "machine (loopback), and say per topic whether they are equal.")
    parser.add_argument("--processes", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--devices-per-process", type=int, default=4,
                        help="emulated CPU devices in each process (default 4)")
    parser.add_argument("--topics", type=_topics, default=TOPICS,
                        help=f"comma-separated, default all: {','.join(TOPICS)}")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds before every process is stopped (default 900)")
    parser.add_argument("--script", help="run this Python script in every process instead")
    args, rest = parser.parse_known_args(argv)
    if rest and not args.script:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.processes < 1 or args.devices_per_process < 1:
        parser.error("--processes and --devices-per-process must be at least 1")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        if args.script:
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
    say(f"tpviz.cluster: {same} of {len(verdicts)} topics match the single-process run "
        f"({time.perf_counter() - start:.0f} s in all).")
    return 0 if same == len(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
