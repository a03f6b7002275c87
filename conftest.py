"""What a test environment without PyTorch skips, saying so (tests and notebooks alike).

`make test` (.venv) and `make test-colab` (.venv-colab, Colab's torch 2.11) install PyTorch;
`make test-newest` (.venv-newest) leaves it out. There, unit tests marked ``@pytest.mark.torch``
and every cell of a chapter that imports torch are skipped with a reason naming the environment,
never silently.
"""

import functools
import importlib.util
import json
import os
import re

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
# a chapter imports torch itself, tpviz's PyTorch runner (tpviz.collectives.torch_run, the
# launcher tpviz.core.launch) or the PyTorch topic (tpviz.pytorch, chapter 13)
IMPORTS_TORCH = re.compile(r"^\s*(import torch|from torch[\s.])|\btorch_run\b"
                           r"|\btpviz\.core\.launch\b|\btpviz\.pytorch\b"
                           r"|from tpviz(\.core)? import .*\b(pytorch|launch)\b", re.MULTILINE)
TORCH_FIXTURES = {"tr"}  # tests/test_collectives.py: the torch_run module, imported on demand


@functools.cache
def _notebook_imports_torch(path) -> bool:
    cells = json.loads(path.read_text())["cells"]
    code = ("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return any(IMPORTS_TORCH.search(source) for source in code)


def pytest_collection_modifyitems(config, items):
    if HAS_TORCH:
        return
    env = os.environ.get("TPVIZ_ENV", "this")
    skip = pytest.mark.skip(reason=f"PyTorch is not installed in the {env} environment "
                                   "(make test-newest leaves it out; make test and make "
                                   "test-colab run this)")
    for item in items:
        path = getattr(item, "path", None)
        param = getattr(getattr(item, "callspec", None), "params", {}).get("path")
        chapters = [p for p in (path, param) if hasattr(p, "suffix") and p.suffix == ".ipynb"]
        if ("torch" in item.keywords or TORCH_FIXTURES & set(getattr(item, "fixturenames", ()))
                or any(_notebook_imports_torch(p) for p in chapters)):
            item.add_marker(skip)
