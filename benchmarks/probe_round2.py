"""A second fresh probe of issue 42 ("every public function refuses nonsense"), written as an
outside prober would: from each topic's ``__all__``, ``inspect.signature`` and the docstrings
only (not from tpviz.core.public, core.validate, the earlier probes or their tests).

Each case is one call with one nonsense argument, while the others are valid (each function's
valid call is run first, as a control: a case whose control fails is not counted). A case runs
in a child process forked from a parent that has imported tpviz, under a 10 s limit and a 4 GiB
address-space cap (RLIMIT_AS above what the parent already maps), and is classified:

* clear: a tpviz error (``tpviz.errors.TpvizError``) whose message names the argument;
* cryptic: a tpviz error whose message does not name it;
* raw: any other exception;  silent: a value returned;  hang: past 10 s;  oom: out of memory.

Run: ``PYTHONPATH=src nice -n 10 python benchmarks/probe_round2.py [-v]``. Results, before
and after the fixes it led to: benchmarks/probe_round2.txt.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import warnings

from probe_round2_cases import CASES, CONTROLS, FRESH, SETUP

LIMIT_S = 10
HEADROOM = 4 * 2**30
KINDS = ("clear", "cryptic", "raw", "silent", "hang", "oom")


def _child(code: str, arg: str, env: dict, w: int) -> None:
    from tpviz.errors import TpvizError

    with open("/proc/self/statm") as statm:
        vm = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vm + HEADROOM, vm + HEADROOM))
    try:
        value = eval(code, env)  # the probe's own cases
        out = ("silent", repr(value)[:160])
    except MemoryError as e:
        out = ("oom", repr(e)[:160])
    except TpvizError as e:
        words = [a for a in arg.split("|") if a]
        out = ("clear" if any(a in str(e) for a in words) else "cryptic",
               f"{type(e).__name__}: {str(e)[:300]}")
    except BaseException as e:  # classified, not handled
        out = ("oom" if "RESOURCE_EXHAUSTED" in str(e) or "std::bad_alloc" in str(e)
               else "raw", f"{type(e).__name__}: {str(e)[:300]}")
    os.write(w, json.dumps(out).encode())
    os._exit(0)


def run_one(code: str, arg: str, env: dict) -> tuple[str, str, float]:
    r, w = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(code, arg, env, w)
    os.close(w)
    deadline = t0 + LIMIT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.perf_counter() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return "hang", f"over {LIMIT_S} s", LIMIT_S
        time.sleep(0.005)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    seconds = time.perf_counter() - t0
    if not data:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return ("oom" if sig in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT) else "raw",
                f"child died (signal {sig}, status {status})", seconds)
    kind, message = json.loads(data)
    return kind, message, seconds


def main(verbose: bool = False) -> dict[str, int]:
    import tpviz

    tpviz.setup_devices(8)
    env: dict = {}
    exec(SETUP, env)  # imports and valid arguments
    warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
    broken = set()
    for fn, code in CONTROLS.items():
        if fn in FRESH:  # runs jax on the mesh: a forked child of a jax process deadlocks
            script = f"import tpviz\ntpviz.setup_devices(8)\n{SETUP}\n{code}"
            done = subprocess.run([sys.executable, "-c", script], timeout=300,
                                  capture_output=True, text=True)
            kind, message = ("silent", "") if done.returncode == 0 else ("raw", done.stderr)
        else:
            kind, message, _ = run_one(code, "", env)
        if kind != "silent":
            broken.add(fn)
            print(f"CONTROL FAILS {fn}: {kind}: {message}", file=sys.stderr)
    counts = dict.fromkeys(KINDS, 0)
    lines = []
    for fn, code, arg in CASES:
        if fn in broken:
            continue
        kind, message, seconds = run_one(code, arg, env)
        counts[kind] += 1
        if kind != "clear" or verbose:
            lines.append(f"{kind:8s} {seconds:5.2f}s {code}  ->  {message}")
    total = sum(counts.values())
    print("\n".join(lines))
    print(f"cases: {len(CASES)}, run: {total} (controls failing: {sorted(broken)})")
    print("  ".join(f"{k}: {v}" for k, v in counts.items()),
          f" clear: {100 * counts['clear'] / max(total, 1):.1f} %")
    return counts


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    main("-v" in sys.argv)
