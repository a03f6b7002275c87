"""What the one validation mechanism (issue 42, :mod:`tpviz.core.public`) costs.

Each measurement times the checked function (the one users call) and the same function without
its wrapper (``inspect.unwrap``) in the same run, alternating, and reports both medians: the
64 × 1024 × 4 interleaved schedule and its simulation (DESIGN.md: < 1 s), every explorer's
redraw from ``explore.BENCHMARKS`` (<= 150 ms), and the cost of one call of small plan-level
functions, from outside tpviz (checked) and from inside it (the checks skipped).

Usage: ``python benchmarks/validation_cost.py [--repeats 5]`` from the repository root with
``src`` on the path. Timings vary with the machine and its load: compare the two columns of one
run, not runs.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
import timeit

sys.path.insert(0, "benchmarks")


def alternate(checked, raw, repeats: int) -> tuple[float, float]:
    """Median seconds of ``checked()`` and ``raw()``, run in turn ``repeats`` times each."""
    a, b = [], []
    for i in range(2 * repeats):
        fn, out = (checked, a) if i % 2 == 0 else (raw, b)
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def redraws(repeats: int) -> list[tuple[str, float, float]]:
    from budgets import widget_settings

    from tpviz.core.widgets import png

    def redraw(render, settings):
        result = render(**settings)
        return png(result[1] if isinstance(result, tuple) else result)

    rows = []
    for render, settings in widget_settings():
        raw = inspect.unwrap(render)
        redraw(render, settings)  # warm-up: fonts, caches, the first compile
        shown = ", ".join(f"{k}={v}" for k, v in list(settings.items())[:2])
        checked_s, raw_s = alternate(lambda r=render, s=settings: redraw(r, s),
                                     lambda r=raw, s=settings: redraw(r, s), repeats)
        rows.append((f"{render.__name__}({shown}) (ms)", 1e3 * checked_s, 1e3 * raw_s))
    return rows


def pipeline(repeats: int) -> list[tuple[str, float, float]]:
    from tpviz.pipeline import schedule, simulate

    sched = schedule("interleaved", 64, 1024, 4)
    plan = alternate(lambda: schedule("interleaved", 64, 1024, 4),
                     lambda: inspect.unwrap(schedule)("interleaved", 64, 1024, 4), repeats)
    run = alternate(lambda: simulate(sched), lambda: inspect.unwrap(simulate)(sched), repeats)
    return [("schedule('interleaved', 64, 1024, 4) (s)", *plan),
            ("simulate of it (s)", *run)]


def per_call() -> list[tuple[str, float, float, float]]:
    """µs per call: checked from outside, raw, and checked from inside tpviz (skipped)."""
    from tpviz import collectives, megatron, pipeline, zero
    from tpviz.core import hardware

    calls = [("megatron.plan(2048, 1024, 4096, 16, 4)", megatron.plan, (2048, 1024, 4096, 16, 4)),
             ("zero.memory(1e9, 8, 2)", zero.memory, (1e9, 8, 2)),
             ("collectives.lower_bound(8, 1e6)", collectives.lower_bound, (8, 1e6)),
             ("pipeline.bubble_formula('1f1b', 4, 8)", pipeline.bubble_formula, ("1f1b", 4, 8)),
             ("hardware.matmul_intensity(256, 4096, 4096)", hardware.matmul_intensity,
              (256, 4096, 4096))]
    inside = {"__name__": "tpviz.benchmark"}  # a caller in tpviz: the checks are skipped
    exec("def call(fn, args):\n    return fn(*args)\n", inside)
    rows = []
    for name, fn, args in calls:
        raw = inspect.unwrap(fn)
        n = 20000
        t = [min(timeit.repeat(lambda f=f, a=args: f(*a), number=n, repeat=5)) / n * 1e6
             for f in (fn, raw)]
        t.append(min(timeit.repeat(lambda f=fn, a=args: inside["call"](f, a), number=n,
                                   repeat=5)) / n * 1e6)
        rows.append((name, *t))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    import tpviz

    tpviz.setup_devices(8, verbose=False)
    print("| call | checked | without the wrapper |\n|---|---|---|")
    for name, a, b in pipeline(args.repeats) + redraws(args.repeats):
        print(f"| {name} | {a:.3g} | {b:.3g} |", flush=True)
    print("\n| one call (µs) | checked (from outside) | without the wrapper | from inside tpviz |"
          "\n|---|---|---|---|")
    for name, a, b, c in per_call():
        print(f"| {name} | {a:.1f} | {b:.1f} | {c:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
