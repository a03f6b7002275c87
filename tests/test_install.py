"""tools/install.py: uv gets pip's configuration, and pip installs when uv cannot."""

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import install

CONFIG = """\
:env:.find-links='/opt/env-wheels'
global.find-links='/opt/wheels'
global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'
global.constraint='/etc/pip/constraints.txt'
global.cert='/etc/ssl/certs/ca.crt'
global.timeout='60'
site.index-url='https://mirror.example/simple'
"""


class Runs:
    """Stands in for subprocess.run: records each command, answers from ``codes``."""

    def __init__(self, codes):
        self.codes, self.commands = codes, []

    def __call__(self, command, **kwargs):
        self.commands.append((command, kwargs))
        if command[1:4] == ["-m", "pip", "config"]:
            return subprocess.CompletedProcess(command, 0, stdout=CONFIG)
        key = " ".join(command[1:4])
        return subprocess.CompletedProcess(command, self.codes.get(key, 0), stdout="")


def test_uv_gets_pips_indexes_links_constraints_and_certificate(monkeypatch):
    runs = Runs({})
    monkeypatch.setattr(install.subprocess, "run", runs)
    command, env = install.uv_command("py", ["-r", "requirements.txt"])
    pairs = list(itertools.pairwise(command))
    # a PIP_* variable wins over the files (pip's own order); both extra indexes kept
    assert ("--find-links", "/opt/env-wheels") in pairs and "/opt/wheels" not in command
    assert ("--extra-index-url", "file:///opt/a/simple") in pairs
    assert ("--extra-index-url", "file:///opt/b/simple") in pairs
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert ("--constraint", "/etc/pip/constraints.txt") in pairs
    assert ("--index-strategy", "unsafe-best-match") in pairs  # pip's best version anywhere
    assert "60" not in command  # options uv has no use for are left out
    assert env["SSL_CERT_FILE"] == "/etc/ssl/certs/ca.crt"
    assert command[-2:] == ["-r", "requirements.txt"]


@pytest.mark.parametrize(("codes", "last"), [
    ({}, "uv"),  # uv present and working: uv installs
    ({"-m uv pip": 1}, "pip"),  # uv fails: pip installs
    ({"-m uv --version": 1, "-m pip install": 1}, "pip"),  # uv cannot be installed: pip
])
def test_pip_installs_when_uv_cannot(monkeypatch, codes, last):
    runs = Runs(codes)
    monkeypatch.setattr(install.subprocess, "run", runs)
    assert install.main(["py", "-e", "."]) == (1 if codes.get("-m pip install") else 0)
    command = runs.commands[-1][0]
    assert command[2] == last and command[-2:] == ["-e", "."]
