"""How the test run is split (conftest.py): unit tests compile at XLA's optimisation level 0,
chapters' kernels at the default; test-colab and test-newest leave out the files marked logic."""

import fnmatch
import importlib.util
import os
from pathlib import Path

import pytest

from tpviz.cluster.worker import FAST_COMPILE

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def root_conftest():
    spec = importlib.util.spec_from_file_location("tpviz_root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_unit_tests_compile_fast():
    assert FAST_COMPILE in os.environ.get("XLA_FLAGS", "").split()


def test_a_chapters_kernel_gets_the_default(root_conftest):
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}", "A": "1"}
    assert root_conftest._chapter_env(env) == {
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "A": "1"}
    assert root_conftest._chapter_env({"XLA_FLAGS": FAST_COMPILE, "A": "1"}) == {"A": "1"}
    assert root_conftest._chapter_env({"A": "1"}) == {"A": "1"}


def test_nbval_starts_a_kernel_without_the_flag(root_conftest, monkeypatch):
    """The hook around a notebook cell's setup (where nbval starts the kernel) takes the flag
    out and puts it back; around a unit test it changes nothing."""
    monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to=/x {FAST_COMPILE}")

    class Item:
        path = ROOT / "book" / "00_devices_meshes_shardings.ipynb"

    hook = root_conftest.pytest_runtest_setup(Item())
    next(hook)
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/x"
    with pytest.raises(StopIteration):
        hook.send(None)
    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/x {FAST_COMPILE}"
    Item.path = ROOT / "tests" / "test_ci_split.py"
    hook = root_conftest.pytest_runtest_setup(Item())
    next(hook)
    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/x {FAST_COMPILE}"


def test_every_logic_pattern_names_test_files(root_conftest):
    names = [p.name for p in (ROOT / "tests").glob("test_*.py")]
    for pattern in root_conftest.LOGIC_FILES:
        assert fnmatch.filter(names, pattern), f"{pattern} matches no test file"
    assert not fnmatch.filter(["test_ci_split.py", "test_compat.py"], "test_ex_*.py")


def test_this_file_is_not_logic(request):
    assert "logic" not in request.node.keywords


def _notebook(path, *sources):
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
def test_a_chapter_whose_kernel_sits_idle_is_ended(root_conftest, monkeypatch, tmp_path):
    """make test's chapter runner ends a run whose whole process tree uses no CPU for IDLE_S
    (a stalled kernel), and keeps one that computes or starts workers; its kernel compiles
    with XLA's default flags."""
    monkeypatch.setattr(root_conftest, "IDLE_S", 6)
    idle = _notebook(tmp_path / "idle.ipynb", "import time\ntime.sleep(120)")
    start = __import__("time").monotonic()
    assert root_conftest._run_apart(idle, str(tmp_path / "idle_out.ipynb")) is None
    assert __import__("time").monotonic() - start < 60
    monkeypatch.setattr(root_conftest, "IDLE_S", 3)  # the loop below runs longer than that
    busy = _notebook(tmp_path / "busy.ipynb",
                     "import subprocess, sys\n"
                     "subprocess.run([sys.executable, '-c', 'x = 0\\nfor i in range(10**8): "
                     "x += i'], check=True)\nimport os\n"
                     "assert 'optimization_level' not in os.environ.get('XLA_FLAGS', '')")
    report = root_conftest._run_apart(busy, str(tmp_path / "busy_out.ipynb"))
    assert report is not None and report["error"] is None and not report["timed_out"]
