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


def book_solution(notebook: str, name: str):
    """The function ``name`` as the book's solution cell in ``book/<notebook>`` defines it, run
    with the imports the chapters use (NumPy, JAX, math, tpviz, ``P``)."""
    import json
    import math
    from pathlib import Path

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec

    import tpviz

    cells = json.loads((Path(__file__).parents[1] / "book" / notebook).read_text())["cells"]
    for cell in cells:
        source = "".join(cell["source"])
        if "# BEGIN SOLUTION" in source and f"def {name}(" in source:
            scope = {"np": np, "jnp": jnp, "jax": jax, "math": math, "tpviz": tpviz,
                     "P": PartitionSpec}
            exec(compile(source, f"{notebook}:{name}", "exec"), scope)
            return scope[name]
    raise LookupError(f"no solution cell of {notebook} defines {name}")
