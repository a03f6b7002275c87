"""``pip install`` into an environment, done by uv when it can be (the Makefile's installs).

    python tools/install.py ENV_PYTHON [pip install arguments ...]

uv (https://docs.astral.sh/uv/) installs the same requirements as pip, with the same resolution
rules (``--index-strategy unsafe-best-match``: the best version from any index, as pip takes it),
faster: the pinned environment took 169 s with pip and 74 s with uv on the 2-core CI machine
(its downloads take 16 s; the rest is compiling every module to bytecode, as pip does too: where
``PYTHONDONTWRITEBYTECODE`` is set, that halves the imports of every kernel and worker the tests
start). uv does not read pip's configuration, so the indexes, find-links, constraint files and
certificate pip is configured with (``pip config list``: files and ``PIP_*`` variables) are
passed on to it. uv is installed into the environment by its own pip first. Whenever uv cannot
be installed or fails, pip does the install itself, as before.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

# pip option -> uv option (values may be lists, separated by spaces, as pip reads them)
OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
           "find-links": "--find-links", "constraint": "--constraint"}
# which of pip's sources wins (``pip config list`` names them): PIP_* variables over the files
RANK = {"global": 0, "user": 1, "site": 2, ":env:": 3}


def pip_settings(python: str) -> dict[str, list[str]]:
    """pip's configured values of :data:`OPTIONS` and ``cert`` (as pip ranks its sources)."""
    run = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True,
                         text=True)
    found: dict[str, tuple[int, list[str]]] = {}
    for line in run.stdout.splitlines():
        key, sep, value = line.partition("=")
        where, _, name = key.rpartition(".")
        rank = RANK.get(where, 0)
        if sep and (name in OPTIONS or name == "cert") and rank >= found.get(name, (-1,))[0]:
            found[name] = (rank, shlex.split(value.strip().strip("'\"")))
    return {name: values for name, (_, values) in found.items()}


def uv_command(python: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    settings = pip_settings(python)
    command = [python, "-m", "uv", "pip", "install", "--python", python, "--quiet",
               "--index-strategy", "unsafe-best-match", "--compile-bytecode"]
    for name, flag in OPTIONS.items():
        for value in settings.get(name, []):
            command += [flag, value]
    env = dict(os.environ)
    if settings.get("cert"):
        env["SSL_CERT_FILE"] = settings["cert"][0]
    return command + args, env


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    python, args = argv[0], argv[1:]
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    have_uv = subprocess.run([python, "-m", "uv", "--version"], capture_output=True).returncode == 0
    if not have_uv:
        have_uv = subprocess.run([*pip, "uv"]).returncode == 0
    if have_uv:
        command, env = uv_command(python, args)
        if subprocess.run(command, env=env).returncode == 0:
            return 0
        print("uv could not install it; pip installs it instead", file=sys.stderr)
    return subprocess.run([*pip, *args]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
