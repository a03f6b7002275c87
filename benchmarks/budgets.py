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
sys.path.insert(0, str(ROOT / "src"))
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


def median_s(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_redraws() -> list[tuple[str, float, float]]:
    from tpviz.explore import (
        PRECISIONS,
        png,
        render_layout,
        render_matmul,
        render_megatron,
        render_mesh2d,
        render_pipeline,
        render_zero,
    )

    import tpviz

    tpviz.setup_devices(8, verbose=False)
    matmul_args = ("X=2, Y=4", "X[B_X, D_Y]", "W[D_Y, F]", 1024, 4096, 4096, "TPU v5e (ICI)", True)
    layouts = [("X=2, Y=4", "A[I_X, J_Y]", 8, 16, "float32"),
               ("X=2, Y=2, Z=2", "A[I_XY, J_Z]", 32, 32, "bf16"),
               ("X=8", "A[I, J_X]", 32, 32, "int8")]
    png(render_layout(*layouts[0]))  # warm-up: fonts, caches
    png(render_matmul(*matmul_args))
    rows = [(f"explore_matmul redraw{' with a compile' if c else ''} (ms)",
             1000 * median_s(lambda c=c: png(render_matmul(*matmul_args, c)), 3),
             1000.0 if c else REDRAW_BUDGET_MS) for c in (False, True)]
    rows += [(f"explore_layout redraw {s[0]} {s[1]} (ms)",
              1000 * median_s(lambda s=s: png(render_layout(*s)), 5), REDRAW_BUDGET_MS)
             for s in layouts]
    # the largest settings the widgets offer (pipeline: p <= 16, m <= 64), and the defaults
    others = {"explore_pipeline": (render_pipeline, [("1f1b", 4, 8, 2, 2.0),
                                                     ("interleaved", 16, 64, 4, 2.0),
                                                     ("zb-h1", 16, 64, 1, 2.0)]),
              "explore_megatron": (render_megatron, [(4, 1024, 4, 16, 2048, "bf16"),
                                                     (16, 12288, 8, 96, 8192, "bf16")]),
              "explore_zero": (render_zero, [("7.5B (ZeRO paper)", 7.5, 64, 2,
                                              next(iter(PRECISIONS)), 80),
                                             ("custom", 70.0, 1024, 3, "fp32 Adam (4 + 4 + 8)",
                                              141)]),
              "explore_mesh2d": (render_mesh2d, [(8, 4, 16384, 4096, 4,
                                                  "H100 cluster (NVLink + InfiniBand)", "bf16"),
                                                 (256, 16, 1 << 20, 16384, 8, "TPU v5p (ICI)",
                                                  "bf16")])}

    def redraw(render, settings) -> bytes:  # a figure, or (HTML table, figure)
        result = render(*settings)
        return png(result[1] if isinstance(result, tuple) else result)

    for name, (render, settings) in others.items():
        redraw(render, settings[0])  # warm-up
        rows += [(f"{name} redraw {s[:3]} (ms)",
                  1000 * median_s(lambda r=render, s=s: redraw(r, s), 5), REDRAW_BUDGET_MS)
                 for s in settings]
    return rows


def time_pipeline() -> list[tuple[str, float, float]]:
    from tpviz.pipeline import schedule, simulate

    seconds = median_s(lambda: simulate(schedule("interleaved", 64, 1024, 4)), 3)
    return [("pipeline plan + simulate 64 x 1024 x 4 (s)", seconds, 1.0)]


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
