"""Measure the performance budgets of DESIGN.md and say which hold.

    .venv/bin/python benchmarks/budgets.py [--notebooks-only | --widgets-only | --browser-only]

- every chapter notebook executes in at most 60 s (chapter 0: 30 s);
- simulating a 64-stage, 1024-microbatch, 4-chunk schedule takes under 1 s (its plan too);
- a widget redraw from a plan (plan + figure + PNG) takes at most 150 ms; one that compiles
  a JAX program, at most 1 s. The settings to time come from each topic's
  ``explore.BENCHMARKS`` (found by walking the ``tpviz`` packages: a new topic needs no edit).
- in the static book, a live figure updates within 50 ms after a control moves (measured in
  headless Chromium by ``make test-book``, which writes ``_build/screenshots/live_times.json``:
  the 90th percentile of every control move of each live figure; run it first).
Exits 1 if a budget is exceeded. Timings vary with the machine: report the machine with them.
Progress goes to stderr, one line per item measured, with the seconds since the start.
"""

from __future__ import annotations

import importlib
import pkgutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
NOTEBOOK_BUDGET_S = {"00_devices_meshes_shardings": 30.0}
DEFAULT_NOTEBOOK_BUDGET_S = 60.0
REDRAW_BUDGET_MS, COMPILING_REDRAW_BUDGET_MS = 150.0, 1000.0
LIVE_UPDATE_BUDGET_MS = 50.0
LIVE_TIMES = ROOT / "_build" / "screenshots" / "live_times.json"
STARTED = time.perf_counter()


def progress(done: int, total: int, line: str) -> None:
    """One line on stderr: item ``done`` of ``total``, seconds since the start, ``line``."""
    print(f"[{done:>3}/{total} {time.perf_counter() - STARTED:6.1f} s] {line}", file=sys.stderr,
          flush=True)


def browser_updates() -> list[tuple[str, float, float]]:
    """Live figures' update times in the browser (ms, 90th percentile), from `make test-book`."""
    import json

    if not LIVE_TIMES.exists():
        print(f"no {LIVE_TIMES.relative_to(ROOT)}: run `make book test-book` to measure the "
              "live figures in the browser")
        return []
    return [(f"live figure {name} (browser, p90 ms)", r["p90_ms"], LIVE_UPDATE_BUDGET_MS)
            for name, r in json.loads(LIVE_TIMES.read_text()).items()]


def time_notebooks() -> list[tuple[str, float, float]]:
    import nbformat
    from nbclient import NotebookClient

    rows = []
    paths = sorted((ROOT / "book").glob("*.ipynb"))
    for i, path in enumerate(paths, start=1):
        progress(i - 1, len(paths), f"notebook {path.name} ...")
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        budget = NOTEBOOK_BUDGET_S.get(path.stem, DEFAULT_NOTEBOOK_BUDGET_S)
        rows.append((f"notebook {path.name} (s)", time.perf_counter() - start, budget))
        progress(i, len(paths), f"notebook {path.name}: {rows[-1][1]:.1f} s")
    return rows


def median_s(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def widget_settings() -> list[tuple[object, dict]]:
    """(render, settings) from every topic package's ``explore.BENCHMARKS``."""
    import tpviz

    found = []
    for info in pkgutil.iter_modules(tpviz.__path__):
        if not info.ispkg:
            continue
        try:
            explore = importlib.import_module(f"tpviz.{info.name}.explore")
        except ModuleNotFoundError:
            continue  # a package without widgets (core, exercises, grading)
        found += list(getattr(explore, "BENCHMARKS", []))
    return found


def time_redraws() -> list[tuple[str, float, float]]:
    import tpviz
    from tpviz.core.widgets import png

    tpviz.setup_devices(8, verbose=False)

    def redraw(render, settings) -> bytes:  # a figure, or (HTML table, figure)
        result = render(**settings)
        return png(result[1] if isinstance(result, tuple) else result)

    rows, warmed = [], set()
    items = widget_settings()
    for i, (render, settings) in enumerate(items, start=1):
        if render not in warmed:  # warm-up: fonts, caches, the first compile
            redraw(render, settings)
            warmed.add(render)
        compiles = bool(settings.get("show_compiled"))
        shown = ", ".join(f"{k}={v}" for k, v in list(settings.items())[:3])
        rows.append((f"{render.__name__} ({shown}{', compiled' if compiles else ''}) (ms)",
                     1000 * median_s(lambda r=render, s=settings: redraw(r, s), 5),
                     COMPILING_REDRAW_BUDGET_MS if compiles else REDRAW_BUDGET_MS))
        progress(i, len(items), f"redraw {rows[-1][0]}: {rows[-1][1]:.0f}")
    return rows


def time_pipeline() -> list[tuple[str, float, float]]:
    from tpviz.pipeline import schedule, simulate

    planned = median_s(lambda: schedule("interleaved", 64, 1024, 4), 3)
    sched = schedule("interleaved", 64, 1024, 4)
    simulated = median_s(lambda: simulate(sched), 3)
    progress(1, 1, f"pipeline plan {planned:.2f} s, simulate {simulated:.2f} s")
    # DESIGN.md: such a schedule "simulates in < 1 s"; its plan (524,288 ops) is shown beside
    return [("pipeline simulate 64 x 1024 x 4 (s)", simulated, 1.0),
            ("pipeline plan 64 x 1024 x 4 (s)", planned, 1.0)]


def main(argv: list[str]) -> int:
    unknown = [a for a in argv if a not in ("--notebooks-only", "--widgets-only", "--browser-only")]
    if unknown:  # --help, a typo: say so, instead of running every notebook (minutes)
        print(__doc__)
        return 0 if unknown in (["-h"], ["--help"]) else 2
    rows = browser_updates()
    if "--browser-only" not in argv:
        rows += time_pipeline()
    if "--notebooks-only" not in argv and "--browser-only" not in argv:
        rows += time_redraws()
    if "--widgets-only" not in argv and "--browser-only" not in argv:
        rows += time_notebooks()
    width = max(len(r[0]) for r in rows)
    over = 0
    for name, value, budget in rows:
        ok = value <= budget
        over += not ok
        print(f"{name:{width}}  {value:8.1f}  budget {budget:6.0f}  {'ok' if ok else 'OVER'}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
