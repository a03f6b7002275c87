"""Install tpviz the way a learner's first notebook cell does on Colab, and prove it installed
tpviz alone.

Run with the colab environment's Python (`make test-colab` does):

    python .ci/install_alone.py requirements-colab.txt

1. A dry run (`pip install --dry-run --report`) must plan to install tpviz and nothing else.
2. A plain `pip install .` (no --no-deps), with `pip freeze` before and after: the only change is
   tpviz, and jax, jaxlib, numpy and ipywidgets still have the versions requirements-colab.txt
   pins (Colab's). On a TPU runtime a replaced JAX no longer matches libtpu.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT = ("jax", "jaxlib", "numpy", "ipywidgets", "ipython", "matplotlib")


def pip(*args: str) -> str:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def freeze() -> dict[str, str]:
    found = {}
    for line in pip("freeze", "--all").splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            found[norm(name)] = version
        elif " @ " in line:
            found[norm(line.split(" @ ")[0])] = line.split(" @ ", 1)[1]
    return found


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", line)
        if m:
            found[norm(m[1])] = m[2]
    return found


def main(requirements: str) -> int:
    wanted = pins(ROOT / requirements)
    pip("uninstall", "--yes", "tpviz")  # so that the check sees a first install, as on Colab
    report = json.loads(pip("install", "--dry-run", "--quiet", "--report", "-", "."))
    planned = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}"
                     for i in report["install"])
    if [p.split("==")[0] for p in planned] != ["tpviz"]:
        sys.exit(f"install_alone: `pip install .` would install {planned}, not tpviz alone. "
                 "Widen pyproject.toml's ranges to admit Colab's versions.")
    before = freeze()
    pip("install", "--quiet", ".")
    after = freeze()
    changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
    if changed != ["tpviz"]:
        sys.exit(f"install_alone: `pip install .` changed {changed}, not tpviz alone: "
                 + ", ".join(f"{n} {before.get(n)} -> {after.get(n)}" for n in changed))
    for name in KEPT:
        if name in wanted and after.get(name) != wanted[name]:
            sys.exit(f"install_alone: {name} is {after.get(name)}, not {wanted[name]} "
                     f"({requirements}).")
    kept = ", ".join(f"{n} {after[n]}" for n in KEPT if n in after)
    print(f"install_alone: `pip install .` installed {planned[0]} alone; kept {kept}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "requirements-colab.txt"))
