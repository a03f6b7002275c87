"""The function check's audit hook refuses /proc however it is spelt.

The verdict of a function answer is trusted for its key (tpviz.grading.fnserve), and the key
is in the process's memory: ``/proc/self/mem``, or ``/proc/self/fd`` for the verdict's pipe,
must stay shut to the learner's code under every spelling. The hook cannot be removed once
added, so each case runs in a Python of its own.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

SCRIPT = """
import json, os, pathlib, sys
from tpviz.grading.fnrun import _guard

learner = _guard()
os.symlink("/proc/self/maps", "to-maps")  # made before the guard: a learner can not
os.symlink("/proc", "to-proc")
pathlib.Path("mine.txt").write_text("mine")
out = {}
for name, how in json.loads(sys.argv[1]).items():
    try:
        with learner():
            exec(how)
        out[name] = "opened"
    except RuntimeError as e:
        out[name] = "refused" if "not allowed" in str(e) else repr(e)
    except OSError as e:
        out[name] = repr(e)
print(json.dumps(out))
"""

PROC = "/proc/self/maps"
REFUSED = {
    "plain": f"open({PROC!r}).close()",
    "double slash": f"open('/{PROC}').close()",
    "dot": "open('/./proc/self/maps').close()",
    "dot dot": "open(os.path.relpath('/proc/self/maps')).close()",
    "a link to it": "open('to-maps').close()",
    "a link to /proc": "open('to-proc/self/maps').close()",
    "bytes": "open(b'//proc/self/maps').close()",
    "a Path": "open(pathlib.Path('//proc/self/maps')).close()",
    "/dev/fd": "open('/dev/fd/0').close()",
    "/dev/stdin": "open('/dev/stdin').close()",
    "os.open": "os.close(os.open('//proc/self/maps', os.O_RDONLY))",
    "a descriptor": "open(0, closefd=False)",
    "a folder for dir_fd": "os.close(os.open('/', os.O_RDONLY))",
    "making a link": "os.symlink('/proc/self/maps', 'later')",
}
ALLOWED = {
    "its own file": "open('mine.txt').read()",
    "a file of the system": "open(sys.executable, 'rb').read(4)",
    "a file with os.open": "os.close(os.open('mine.txt', os.O_RDONLY))",
}


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux only")
def test_proc_is_refused_under_every_spelling_and_other_files_open(tmp_path):
    cases = {**REFUSED, **ALLOWED}
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(cases)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.splitlines()[-1])
    assert {k: out[k] for k in REFUSED} == dict.fromkeys(REFUSED, "refused")
    assert {k: out[k] for k in ALLOWED} == dict.fromkeys(ALLOWED, "opened")
