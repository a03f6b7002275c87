import jax
import numpy as np
import pytest
from checking import fails as _fails
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from matplotlib.patches import Rectangle

import tpviz
from tpviz.errors import ShardingError


def _labels(fig):
    return sorted(t.get_text() for t in fig.axes[0].texts)


def test_planned_layout_shows_replication():
    fig = tpviz.layouts.draw.sharding((8, 16), "A[I_X, J]", {"X": 2, "Y": 4}, dtype="bf16")
    assert len([p for p in fig.axes[0].patches if isinstance(p, Rectangle)]) == 2
    assert _labels(fig) == ["D0\nD1\nD2\nD3", "D4\nD5\nD6\nD7"]
    assert "128 bytes per device" in fig.axes[0].get_title()  # a [4, 16] block of 2-byte elements


def test_real_array_drawing_names_the_devices_that_hold_each_block():
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))
    x = jax.device_put(np.zeros((8, 16), np.float32), NamedSharding(mesh, P("X", "Y")))
    fig = tpviz.layouts.draw.array(x)
    expected = sorted(f"D{d.id}" for d in mesh.devices.flat)
    assert _labels(fig) == expected
    assert "A[I_X, J_Y]" in fig.axes[0].get_title()


def test_palette_is_distinct():
    assert len(set(tpviz.core.figures.palette(8))) == 8
    assert len({tuple(c) for c in tpviz.core.figures.palette(16)}) == 16


def test_three_dimensional_arrays_are_refused_clearly():
    with pytest.raises(ShardingError, match="1D or 2D"):
        tpviz.layouts.draw.sharding((2, 2, 2), P(), {"X": 2})


# --- the chapter's new checkers: the right answer, plausible wrong answers, the stub -----------


def test_block_notation_checker(capsys):
    tpviz.exercises.check_block_notation("A[I_X, J_Y]")  # [8/2, 32/4] = [4, 8]
    assert "✓" in capsys.readouterr().out
    _fails(tpviz.exercises.check_block_notation, "A[I_Y, J_X]", words=r"\[2, 16\] block")
    _fails(tpviz.exercises.check_block_notation, "A[I_X, J]", words=r"\[4, 32\] block")
    _fails(tpviz.exercises.check_block_notation, "A[I_Z, J]", words="does not fit the mesh")
    tpviz.exercises.check_block_notation(...)
    assert "not attempted" in capsys.readouterr().out


def test_fit_layout_checker(capsys):
    mib = 2**20
    # In[B_X, D_Y]: [8192, 2048] bf16 = 32 MiB; W1[D_Y, F]: [2048, 32768] bf16 = 128 MiB
    tpviz.exercises.check_fit_layout("In[B_X, D_Y]", "W1[D_Y, F]", 160 * mib)
    assert "✓" in capsys.readouterr().out
    tpviz.exercises.check_fit_layout("In[B_X, D_Y]", "W1[D_X, F_Y]", 96 * mib)  # 32 + 64
    assert "✓" in capsys.readouterr().out
    check = tpviz.exercises.check_fit_layout
    _fails(check, "In[B_X, D]", "W1[D_X, F_Y]", 192 * mib, words="over the 160 MiB")  # 128 + 64
    _fails(check, "In[B_X, D_Y]", "W1[D_X, F]", 288 * mib, words="over the 160 MiB")  # 32 + 256
    _fails(check, "In[B_XY, D]", "W1[D, F_Y]", 160 * mib, words="over X alone")
    _fails(check, "In[B_X, D_Y]", "W1[D_Y, F]", 320 * mib, words="bytes per device")  # 4 B/elt
    _fails(check, "In[B_X, D_Z]", "W1[D_Y, F]", 160 * mib, words="does not fit the mesh")
