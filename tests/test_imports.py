"""`import tpviz` loads a topic only when it is first used (PEP 562), and every public name
resolves."""

import subprocess
import sys

import pytest

import tpviz


def test_topics_load_when_used_and_every_public_name_resolves():
    code = """
import sys
import tpviz
assert "tpviz.autoshard" not in sys.modules and "scipy.optimize" not in sys.modules
tpviz.moe.exercises.DROP_CHOICES  # a topic comes with its exercises room
assert "tpviz.moe" in sys.modules and "tpviz.autoshard" not in sys.modules
for name in tpviz.__all__:
    getattr(tpviz, name)
for name in tpviz.exercises.__all__:
    getattr(tpviz.exercises, name)
print(len(tpviz.exercises.__all__))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout.split()[-1]) >= 100  # every chapter's checkers


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        tpviz.nonsense  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'check_nonsense'"):
        tpviz.exercises.check_nonsense  # noqa: B018
