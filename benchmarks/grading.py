"""Measure the grading budget of issue 41: a class's submissions of one chapter, graded in their
sandboxes by ``tpviz-grade``, in at most 6 minutes for 30 on an idle 2-core machine.

    .venv/bin/python benchmarks/grading.py [--chapter 05_zero] [--submissions 30] [--workers 2]

A third of the submissions hold the book's answers, a third wrong ones (every ``= ...`` made
``= -1``, every stub function returning None) and a third are the student copy untouched. They
are graded from scratch (no kept release, compile cache or grades) by ``python -m
tpviz.grading.grade`` with this checkout's tpviz. Reported: the wall time; the load average
before and after; the CPU time of the grading and of every process it starts, sandboxes
included (the larger of: psutil, sampled every 0.05 s, which misses what a process does after
its last sample; and the CPU time of the descendants waited for, which misses those killed
with a sandbox before their parent waited for them);
the CPU time before the first submission starts (nbgrader's release and the compile cache's
warm-up, one process at a time); and from these an estimate of the wall time on an idle machine
with ``--cores`` cores (2 by default): the part before the submissions, plus the rest divided
by the cores the workers can use. The machine the book is tested on is shared, so the wall time
alone says little there. ``--no-sandbox`` grades without bubblewrap, so that two runs give the
sandbox's overhead per submission. ``--warm`` then grades the same submissions again
(``--regrade``) with the release and the compile cache kept from the first run, as a second run
of the class does.
Each run also reports the seconds of each submission (its ``Result.seconds``, from the first
cell to its last verdict, while the other worker grades another) and the highest one-minute
load average seen during the run. Exits 1 if a grade is not the expected one or an estimate
exceeds the budget.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
BUDGET_S = 360.0  # for 30 submissions


def hand_in(folder: Path, chapter: str, n: int) -> dict[str, float]:
    """Write ``n`` submissions; return the points each should get."""
    from tpviz.grading.release import release

    release(ROOT / "book", folder / "student", [chapter])
    book = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())
    meta = lambda c: c["metadata"].get("nbgrader", {})  # noqa: E731
    right = {meta(c)["grade_id"]: c["source"] for c in book["cells"] if meta(c).get("solution")}
    full = sum(float(meta(c)["points"]) for c in book["cells"] if meta(c).get("grade"))
    expected = {}
    for k in range(n):
        nb = json.loads((folder / "student" / f"{chapter}.ipynb").read_text())
        for cell in nb["cells"]:
            if meta(cell).get("solution") and k % 3 == 0:
                cell["source"] = right[meta(cell)["grade_id"]]
            elif meta(cell).get("solution") and k % 3 == 1:
                text = re.sub(r"= \.\.\.", "= -1", "".join(cell["source"]))
                cell["source"] = re.sub(r"raise NotImplementedError\(.*\)", "return None", text)
        path = folder / "submissions" / f"s{k:02d}" / f"{chapter}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb))
        expected[f"s{k:02d}"] = full if k % 3 == 0 else 0.0
    return expected


class CpuMeter:
    """CPU seconds of a process and all its descendants, sampled every ``every`` seconds."""

    def __init__(self, pid: int, every: float = 0.05):
        import psutil

        self.root, self.every, self.seen = psutil.Process(pid), every, {}
        self.load = os.getloadavg()[0]  # the highest one-minute load average seen
        self.done = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        import psutil

        while not self.done.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                procs = []
            for p in procs:
                try:
                    t = p.cpu_times()
                    self.seen[(p.pid, p.create_time())] = t.user + t.system
                except psutil.Error:
                    pass
            self.load = max(self.load, os.getloadavg()[0])
            time.sleep(self.every)

    def seconds(self) -> float:
        return sum(self.seen.values())


def grade(folder: Path, args, regrade: bool) -> dict:
    """Grade the submissions in ``folder`` once; the figures of that run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    load, start = os.getloadavg(), time.perf_counter()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.Popen([sys.executable, "-m", "tpviz.grading.grade", "submissions", "grades",
                            "--book", str(ROOT / "book"), "--workers", str(args.workers),
                            *(["--regrade"] if regrade else []),
                            *(["--no-sandbox"] if args.no_sandbox else [])],
                           cwd=folder, env=env, stderr=subprocess.PIPE, text=True)
    meter, before = CpuMeter(run.pid), None
    for line in run.stderr:
        print(line, end="", file=sys.stderr)
        if before is None and ("compiled programs" in line or "could not be filled" in line):
            before = meter.seconds()  # the release and the warm-up (or the kept cache's line)
    run.wait()
    wall = time.perf_counter() - start
    time.sleep(2 * meter.every)
    meter.done.set()
    now = resource.getrusage(resource.RUSAGE_CHILDREN)  # every descendant waited for
    waited = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    cpu, before = max(meter.seconds(), waited), before or 0.0
    each = []
    for file in (folder / "grades" / ".tpviz-cache").glob("[!.]*/*.json"):  # not .releases
        each.append(json.loads(file.read_text())["seconds"])
    return {"wall": wall, "load": load, "after": os.getloadavg(), "peak": meter.load,
            "cpu": cpu, "sampled": meter.seconds(), "waited": waited, "before": before,
            "code": run.returncode, "each": sorted(each),
            "estimate": before + (cpu - before) / max(1, min(args.workers, args.cores))}


def report(what: str, r: dict, args, budget: float) -> None:
    each = r["each"] or [0.0]
    loads = lambda t: "/".join(f"{x:.1f}" for x in t)  # noqa: E731
    print(f"{what}: {args.submissions} submissions of {args.chapter}, {args.workers} workers: "
          f"wall {r['wall']:.0f} s (load average 1/5/15 min {loads(r['load'])} before, "
          f"{loads(r['after'])} after, one-minute peak {r['peak']:.1f}); CPU {r['cpu']:.0f} s "
          f"(sampled {r['sampled']:.0f} s, waited for {r['waited']:.0f} s), "
          f"of which {r['before']:.0f} s before the first submission; per submission "
          f"{sum(each) / len(each):.1f} s (min {each[0]:.1f}, max {each[-1]:.1f}); on an idle "
          f"{args.cores}-core machine about {r['estimate']:.0f} s (budget {budget:.0f} s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chapter", default="05_zero")
    parser.add_argument("--submissions", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2, help="cores of the idle machine")
    parser.add_argument("--warm", action="store_true",
                        help="grade again with the release and compile cache kept")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade without bubblewrap (to measure the sandbox's overhead "
                             "against a run with it)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tpviz-grading-benchmark-"))
    expected = hand_in(folder, args.chapter, args.submissions)
    budget = BUDGET_S * args.submissions / 30
    runs = {"cold": grade(folder, args, regrade=False)}
    if args.warm:
        runs["warm"] = grade(folder, args, regrade=True)
    with open(folder / "grades" / "grades.csv") as f:
        got: dict[str, float] = {}
        for row in csv.DictReader(f):
            got[row["student"]] = got.get(row["student"], 0.0) + float(row["points"])
    wrong = {s: (got.get(s), want) for s, want in expected.items() if got.get(s) != want}
    for what, r in runs.items():
        report(what, r, args, budget)
    print(f"{len(wrong)} grades not as expected {wrong or ''}")
    print(f"(the submissions and grades are in {folder})")
    ok = all(r["code"] == 0 and r["estimate"] <= budget for r in runs.values())
    return 0 if ok and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
