"""Measure the performance budgets of DESIGN.md and say which hold.

    .venv/bin/python benchmarks/budgets.py [--notebooks-only | --widgets-only]

- every chapter notebook executes in at most 60 s (chapter 0: 30 s);
- planning + simulating a 64-stage, 1024-microbatch, 4-chunk schedule takes under 1 s;
- a widget redraw from a plan (plan + figure + PNG) takes at most 150 ms; one that compiles
  a JAX program, at most 1 s.
Exits 1 if a budget is exceeded. Timings vary with the machine: report the machine with them.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_BUDGET_S = {"00_devices_meshes_shardings": 30.0}
DEFAULT_NOTEBOOK_BUDGET_S = 60.0
REDRAW_BUDGET_MS = 150.0


def time_notebooks() -> list[tuple[str, float, float]]:
    import nbformat
    from nbclient import NotebookClient

    rows = []
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        budget = NOTEBOOK_BUDGET_S.get(path.stem, DEFAULT_NOTEBOOK_BUDGET_S)
        rows.append((f"notebook {path.name} (s)", time.perf_counter() - start, budget))
    return rows


def time_redraws() -> list[tuple[str, float, float]]:
    sys.path.insert(0, str(ROOT / "src"))
    import tpviz
    from tpviz.explore import png, render_layout

    tpviz.setup_devices(8, verbose=False)

    settings = [("X=2, Y=4", "A[I_X, J_Y]", 8, 16, "float32"),
                ("X=2, Y=2, Z=2", "A[I_XY, J_Z]", 32, 32, "bf16"),
                ("X=8", "A[I, J_X]", 32, 32, "int8")]
    png(render_layout(*settings[0]))  # warm-up: fonts, caches
    rows = []
    from tpviz.explore import render_matmul

    png(render_matmul("X=2, Y=4", "X[B_X, D_Y]", "W[D_Y, F]", 1024, 4096, 4096, "TPU v5e (ICI)"))
    for compile_ in (False, True):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            png(render_matmul("X=2, Y=4", "X[B_X, D_Y]", "W[D_Y, F]", 1024, 4096, 4096,
                              "TPU v5e (ICI)", True, compile_))
            times.append((time.perf_counter() - start) * 1000)
        rows.append((f"explore_matmul redraw{' with a compile' if compile_ else ''} (ms)",
                     statistics.median(times), 1000.0 if compile_ else REDRAW_BUDGET_MS))
    for s in settings:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            png(render_layout(*s))
            times.append((time.perf_counter() - start) * 1000)
        rows.append((f"explore_layout redraw {s[0]} {s[1]} (ms)", statistics.median(times),
                     REDRAW_BUDGET_MS))
    return rows


def time_pipeline() -> list[tuple[str, float, float]]:
    sys.path.insert(0, str(ROOT / "src"))
    from tpviz.pipeline import schedule, simulate

    times = []
    for _ in range(3):
        start = time.perf_counter()
        simulate(schedule("interleaved", 64, 1024, 4))
        times.append(time.perf_counter() - start)
    return [("pipeline plan + simulate 64 x 1024 x 4 (s)", statistics.median(times), 1.0)]


def main(argv: list[str]) -> int:
    rows = time_pipeline()
    if "--notebooks-only" not in argv:
        rows += time_redraws()
    if "--widgets-only" not in argv:
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
