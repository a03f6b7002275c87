"""Helpers for the checker tests: a right answer passes, a wrong one fails with words, a stub
says "not attempted"."""

import pytest

from tpviz.exercises import ExerciseFailed


def passes(check, *args, capsys):
    check(*args)
    assert "✓" in capsys.readouterr().out


def fails(check, *args, words):
    """The checker says ✗ with ``words``, as one line (IPython shows it instead of a stack)."""
    with pytest.raises(ExerciseFailed, match=words) as info:
        check(*args)
    rendered = info.value._render_traceback_()
    assert len(rendered) == 1 and str(info.value) in rendered[0]
    return str(info.value)


def stub(check, *args, capsys):
    check(*args)
    assert "not attempted" in capsys.readouterr().out
