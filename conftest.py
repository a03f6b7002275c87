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
import shutil
import sys
import tempfile

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


# --- what test-colab and test-newest leave out: the library's own logic ----------------------
# Those two environments are there to catch what a release of JAX, NumPy, ipywidgets or
# matplotlib changes. They run every chapter under nbval (each checker on the book's answer and
# the compiled program it reads, every figure, every claim) and the unit tests of the layers
# that meet those libraries. The tests below exercise the library's own logic above those
# layers many times over (each checker's unit tests and mutation pass, every public parameter
# fuzzed with bad values, the precomputed tables): make test runs them; they are marked
# ``logic`` here, by file, and the other two environments run ``-m "not slow and not logic"``.
LOGIC_FILES = ("test_ex_*.py", "test_wrong_programs_*.py", "test_public.py",
               "test_precomputed_tables.py")


def _mark_logic(items) -> None:
    import fnmatch

    for item in items:
        path = getattr(item, "path", None)
        if (path is not None and path.parent.name == "tests"
                and any(fnmatch.fnmatch(path.name, pattern) for pattern in LOGIC_FILES)):
            item.add_marker(pytest.mark.logic)


# The files that take longest (make test's profile, 2-core machine), run first: xdist hands out
# whole files in collection order, so a long file left to the end keeps one worker busy while
# the other idles. Only the order changes; a file not named keeps its place after these.
LONGEST = ("11_together.ipynb", "09_context_parallelism.ipynb", "test_cluster.py",
           "08_async_pipelines.ipynb", "test_grading_class.py", "07_pipeline.ipynb",
           "14_inference.ipynb", "10_moe.ipynb", "01_collectives.ipynb", "test_cheating.py",
           "13_pytorch.ipynb", "04_megatron.ipynb", "12_autoshard.ipynb", "test_figures_fit.py",
           "test_ex_inference.py", "test_together.py", "06_mesh2d.ipynb", "05_zero.ipynb")


def _longest_first(items) -> None:
    rank = {name: k for k, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(getattr(item, "path", None) and item.path.name,
                                         len(LONGEST)))


def pytest_collection_modifyitems(config, items):
    _longest_first(items)
    _mark_logic(items)
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


# --- one JAX compilation cache for the whole run ---------------------------------------------
# The tests, the chapters and the checkers compile many of the same programs (a checker's
# reference in several tests; one program in several chapters). One persistent compilation
# cache in a temporary folder, shared by the xdist workers and every kernel they start (they
# inherit the environment), compiles each once per run. JAX keys each entry by the program, its
# version and the compile options, XLA_FLAGS included: the unit tests (optimisation level 0,
# below) and the chapters (the default) share entries only among themselves. The folder goes
# when the run ends.
JAX_CACHE = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
             "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


# --- the unit tests compile without LLVM's optimisations; the chapters as learners run them ---
# XLA's CPU code generation at optimisation level 0 (tpviz.cluster.worker.FAST_COMPILE, which
# the cluster runs use too) takes about a third less CPU time over the checkers' tests. It acts
# after the HLO passes that place the collectives and plan the buffers: the compiled HLO and
# its memory analysis are the same (checked on JAX 0.7.2, 0.10.2 and 0.12.0.1). The unit
# tests, and every process they start, get it; a chapter's kernel does not (_chapter_env), so
# the chapters run, and the book is built, exactly as a learner's notebook runs.
def _fast_compile() -> str:
    from tpviz.cluster.worker import FAST_COMPILE

    return FAST_COMPILE


def _chapter_env(env: dict) -> dict:
    """``env`` without the unit tests' XLA flag (for a chapter's kernel)."""
    flags = env.get("XLA_FLAGS", "").replace(_fast_compile(), "").split()
    env = {k: v for k, v in env.items() if k != "XLA_FLAGS"}
    return {**env, "XLA_FLAGS": " ".join(flags)} if flags else env


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """nbval starts a chapter's kernel in its first cell's setup: without the unit tests' flag."""
    if getattr(item, "path", None) is None or item.path.suffix != ".ipynb":
        return (yield)
    saved = os.environ.get("XLA_FLAGS")
    os.environ.pop("XLA_FLAGS", None)
    os.environ.update(_chapter_env({"XLA_FLAGS": saved or ""}))
    try:
        return (yield)
    finally:
        os.environ.pop("XLA_FLAGS", None)
        if saved is not None:
            os.environ["XLA_FLAGS"] = saved


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return  # an xdist worker: it has the controller's environment
    flags = os.environ.get("XLA_FLAGS", "")
    if _fast_compile() not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_fast_compile()}".strip()
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return  # a cache chosen by the caller
    config.tpviz_jax_cache = tempfile.mkdtemp(prefix="tpviz-jax-cache-")
    os.environ.update(JAX_CACHE, JAX_COMPILATION_CACHE_DIR=config.tpviz_jax_cache)


def pytest_unconfigure(config):
    folder = getattr(config, "tpviz_jax_cache", None)
    if folder:
        for name in (*JAX_CACHE, "JAX_COMPILATION_CACHE_DIR"):
            os.environ.pop(name, None)
        shutil.rmtree(folder, ignore_errors=True)


# --- make test: every chapter executed once, into the book's execution cache -----------------
# With --chapters-into-cache (the pinned `make test`), each chapter is one test that executes
# the whole notebook in a fresh kernel, fails with the cell's error, and stores the executed
# notebook in _build/.jupyter_cache, the cache `make book` reads (jupyter-cache, keyed by the
# notebook's code): the book is then built from these very runs instead of running every chapter
# again. Without the option (test-colab, test-newest) the chapters run under nbval as before.
BOOK_CACHE = os.path.join(os.path.dirname(__file__), "_build", ".jupyter_cache")
CHAPTER = re.compile(r"^\d\d_.*\.ipynb$")
STALL_S = 150  # a cell's limit: each chapter's slowest cell takes under 60 s on 2 loaded cores
IDLE_S = 45  # a chapter whose runner, kernel and their children use no CPU this long has stalled
CHAPTER_S = 900  # a chapter's: each runs in under 2 minutes on 2 loaded cores


def _cpu_seconds(process) -> float:
    """CPU time used so far by ``process`` and everything under it (reaped children too)."""
    import psutil

    total = 0.0
    for p in (process, *process.children(recursive=True)):
        try:
            t = p.cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _run_apart(path, out: str) -> dict | None:
    """Run the chapter ``path`` into ``out`` in a process of its own (tools/run_chapter.py);
    its report, or None when it had to be ended: its kernel stopped answering (the runner, the
    kernel and their children used no CPU for IDLE_S seconds: every cell of a chapter computes,
    none waits on a clock), or the chapter took CHAPTER_S."""
    import subprocess
    import time

    import psutil

    runner = os.path.join(os.path.dirname(__file__), "tools", "run_chapter.py")
    proc = subprocess.Popen([sys.executable, runner, str(path), out, str(STALL_S)],
                            env=_chapter_env(dict(os.environ)))
    tree = psutil.Process(proc.pid)
    start = busy = time.monotonic()
    used = 0.0
    while proc.poll() is None:
        now = time.monotonic()
        try:
            cpu = _cpu_seconds(tree)
        except psutil.Error:  # the runner ended between poll and here
            continue
        if cpu > used + 0.05:
            used, busy = cpu, now
        if now - busy > IDLE_S or now - start > CHAPTER_S:
            for child in tree.children(recursive=True):  # the kernel too
                child.kill()
            proc.kill()
            proc.wait()
            return None
        time.sleep(1)
    if not os.path.exists(out + ".json"):
        raise ChapterFailed(f"the chapter's runner ended with code {proc.returncode} "
                            "(its output is above)")
    with open(out + ".json") as f:
        return json.load(f)


def pytest_addoption(parser):
    parser.addoption("--chapters-into-cache", action="store_true",
                     help="execute each book chapter as one test and keep its outputs in "
                          "_build/.jupyter_cache for `make book`")


def pytest_collect_file(parent, file_path):
    if (parent.config.getoption("--chapters-into-cache") and CHAPTER.match(file_path.name)
            and file_path.parent.name == "book"):
        return ChapterFile.from_parent(parent, path=file_path)
    return None


class ChapterFile(pytest.File):
    def collect(self):
        yield ChapterRun.from_parent(self, name="runs top to bottom")


class ChapterRun(pytest.Item):
    def runtest(self):
        import nbformat

        # A kernel that stops answering is the notebook runner's fault, not the chapter's: a
        # chapter a run (04, 10, 02 at random) sat with its kernel idle and the client waiting,
        # for 175 s to over 10 min (past nbclient's cell timeout), while it runs in 8-30 s
        # alone (ipykernel 7; requirements.txt pins 6 since; seen again with 6: chapter 10,
        # both the client and the kernel idle in their event loops, py-spy). Each try runs in a
        # process of its own (tools/run_chapter.py), ended with its kernel once the whole tree
        # has used no CPU for IDLE_S (or after CHAPTER_S); a stalled try gets one more in a
        # fresh kernel, a "ChapterRetried" warning. A cell that errs, or two stalls, fail.
        # The stall's cause: nbclient's poll for the reply missed its socket's wake-up; the
        # runner now polls in slices (tpviz.grading.runner.poll_in_slices), and the watch
        # stays for what else may hang.
        for attempt in (1, 2):
            with tempfile.TemporaryDirectory() as folder:
                out = os.path.join(folder, "run.ipynb")
                report = _run_apart(self.path, out)
                if report and not report["timed_out"]:
                    nb = nbformat.read(out, as_version=4)
                    answers = _answer_kinds(out + ".answers")
                    break
            if attempt == 2:
                raise ChapterFailed(f"its kernel stopped answering twice (idle {IDLE_S} s, a "
                                    f"cell {STALL_S} s, or the chapter {CHAPTER_S} s)")
            import warnings

            # a UserWarning, named in its text: xdist sends a warning to the controller by its
            # class's module and name, and this file's module name, "conftest", is also
            # tests/conftest.py's (a class of its own here crashed the worker, CI, ci11)
            warnings.warn(f"ChapterRetried: {self.path.name}: its kernel stopped answering "
                          f"(idle {IDLE_S} s, a cell {STALL_S} s, or the chapter {CHAPTER_S} s); "
                          "run again in a fresh kernel", UserWarning, stacklevel=1)
        if report["error"] is not None:
            raise ChapterFailed(report["error"])
        _store(nb, self.path, report["seconds"])
        routes = _wrong_routes(self.path, answers)
        if routes:
            raise ChapterFailed("the grader would judge these exercises the wrong way "
                                "(tpviz.grading.prepare):\n" + "\n".join(routes))
        # saved as run (outputs and widget state), it must stay small enough to keep and mail
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "tools"))
        import saved_size

        message = saved_size.too_large(nb, self.path.name)
        if message:
            raise ChapterFailed(message)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ChapterFailed):
            return f"{self.path.name} failed:\n{excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: runs top to bottom"


class ChapterFailed(Exception):
    pass


def _answer_kinds(path: str) -> dict[str, set[bool]]:
    """``{checker: {whether its answers were plain data}}`` from a chapter run's log."""
    kinds: dict[str, set[bool]] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                entry = json.loads(line)
                kinds.setdefault(entry["checker"], set()).add(entry["plain"])
    return kinds


def _wrong_routes(path, answers: dict[str, set[bool]]) -> list[str]:
    """Each graded exercise whose book answer the grader would route the wrong way: an object
    sent to the judge of plain data (scored 0), or plain data let into the function check (a
    learner's object would run beside the checker)."""
    import nbformat

    from tpviz.grading import metadata, prepare, student

    release = nbformat.read(path, as_version=4)
    for cell in release.cells:
        if cell.cell_type == "code":
            cell.source = student.strip_solutions(metadata.source(cell))
    problems = []
    for ex in prepare.exercises_of(release):
        kinds = answers.get(ex.checker)
        if not kinds:
            problems.append(f"{ex.checker}: never called in the chapter")
        elif False in kinds and not ex.takes_code:
            problems.append(f"{ex.checker}: the book's answer is an object, graded as plain "
                            "data (add it to prepare.OBJECT_ANSWERS)")
        elif kinds == {True} and ex.takes_code:
            problems.append(f"{ex.checker}: the book's answer is plain data, graded by running "
                            "it (add it to prepare.PLAIN_ANSWERS)")
    return problems


def _store(nb, path, seconds: float) -> None:
    """Into the book's cache; the two test workers may write at once (SQLite: retry)."""
    import time

    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    for attempt in range(20):
        try:
            get_cache(BOOK_CACHE).cache_notebook_bundle(
                CacheBundleIn(nb, str(path), data={"execution_seconds": seconds}),
                check_validity=False, overwrite=True)
            return
        except Exception as e:  # sqlite3 / SQLAlchemy "database is locked"
            if "locked" not in str(e) or attempt == 19:
                raise
            time.sleep(0.5)
