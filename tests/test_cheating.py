"""Answers that read or fake the answer, and function answers that reach into their checker
(issue 41), checked without a class: the plain-value conversion, the checkers it protects, the
plain data that leaves a sandbox, and the function runner's guard."""

import json
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

import tpviz
from tpviz.core import values
from tpviz.core.exercises import ExerciseFailed, Wrong, checker
from tpviz.grading import plain


class Sneaky(float):
    """0, but ``float()`` of it reads ``expected`` from the caller's frames."""

    def __float__(self):
        f = sys._getframe(1)
        while f is not None:
            if "expected" in f.f_locals:
                return float(f.f_locals["expected"])
            f = f.f_back
        return 0.0

    __int__ = __float__


class Yes(str):
    __eq__ = lambda self, other: True  # noqa: E731
    __ne__ = lambda self, other: False  # noqa: E731
    __hash__ = str.__hash__


class Number:  # not a number at all, but it says it is one when asked
    def __float__(self):
        return 42.0

    __eq__ = lambda self, other: True  # noqa: E731


def test_answers_are_plain_before_the_checker_sees_them():
    assert type(values.plain(Sneaky(0))) is float and values.plain(Sneaky(0)) == 0.0
    assert type(values.plain(Yes("x"))) is str
    nested = values.plain({"a": [Yes("b"), (Sneaky(1),)], 2: {3}})
    assert nested == {"a": ["b", (1.0,)], 2: {3}} and type(nested["a"][0]) is str
    with pytest.raises(Wrong, match="defined in the notebook"):
        values.plain(Number())
    with pytest.raises(Wrong, match="defined in the notebook"):
        values.plain({"a": [Number()]})
    assert values.plain(len) is len and values.plain(np.float32(2)) == 2  # functions, NumPy
    assert values.as_number(Fraction(3, 2)) == 1.5 and values.as_integer(np.int64(3)) == 3
    with pytest.raises(Wrong):
        values.as_number(Number())


def test_a_number_that_reads_the_expected_value_scores_nothing():
    @checker("Bytes")
    def check(answer):
        expected = 8_388_608
        values.expect_bytes(answer, expected)

    with pytest.raises(ExerciseFailed, match="is 0, which is not right"):
        check(Sneaky(0))
    with pytest.raises(ExerciseFailed, match="defined in the notebook"):
        check(Number())


def test_strings_that_equal_everything_pass_no_checker():
    for name, args in (("check_memory_cap", [Yes("nonsense")]),
                       ("check_context_design", [Yes("nonsense"), Yes("nonsense"), 1.0]),
                       ("check_fit_layout", [Yes("nonsense"), Yes("nonsense"), 1])):
        with pytest.raises(ExerciseFailed):
            getattr(tpviz.exercises, name)(*args)


def test_all_candidate_names_in_one_string_are_not_an_answer():
    right = {"make_mesh": "init_device_mesh", "P('x', None)": "Shard(0)", "P()": "Replicate()",
             "an unreduced sum": "Partial()", "psum": "funcol.all_reduce"}
    tpviz.exercises.check_jax_to_torch(right)
    tpviz.exercises.check_jax_to_torch({**right, "P('x', None)": "Shard(dim=0)", "psum":
                                        "torch.distributed.all_reduce"})
    every = "init_device_mesh Shard(0) Replicate() Partial() all_reduce"
    with pytest.raises(ExerciseFailed):
        tpviz.exercises.check_jax_to_torch(dict.fromkeys(right, every))


# (checker, right answer from the exercise's own numbers): one byte more must fail
BYTES = [("check_bytes_per_device", 4096 // 2 * 8192 // 4 * 2),
         ("check_all_gather_bytes", 512 * 4096 * 2),
         ("check_ring_bytes", 2 * 7 / 8 * 400e6),
         ("check_fsdp_bytes", 4 * (64 * 64 + 64) * 2 / 8),
         ("check_weight_bytes", (4 * 12288**2 + 2 * 12288 * 4 * 12288) * 2 // 8),
         ("check_ring_attention_bytes", 7 * 2 * (32768 // 8) * 4096 * 2),
         ("check_edge_bytes", 3 / 4 * 2048 * 1024 * 4),
         ("check_column_parallel_bytes", 2 * 7 / 8 * 1024 * 4096 * 4)]


@pytest.mark.parametrize(("name", "right"), BYTES, ids=[b[0] for b in BYTES])
def test_byte_counts_are_exact(name, right, capsys):
    check = getattr(tpviz.exercises, name)
    check(right)
    assert "✓" in capsys.readouterr().out
    for off in (right + 1, right - 1, int(right) + 1.0):
        with pytest.raises(ExerciseFailed):
            check(off)


def test_plain_data_keeps_values_and_drops_behaviour():
    from jax.sharding import PartitionSpec as P

    value = {"a": (1, 2.5, "x"), "b": {1, 2}, 3: Fraction(1, 3), "n": np.arange(4.0),
             "s": np.float32(1.5), "p": P(("X", "Y"), None), "e": ..., "y": Yes("w")}
    back = plain.loads(plain.dumps(value))
    assert back["a"] == (1, 2.5, "x") and back["b"] == {1, 2} and back[3] == Fraction(1, 3)
    assert back["n"].tolist() == [0, 1, 2, 3] and back["s"].dtype == np.float32
    assert back["p"] == P(("X", "Y"), None) and back["e"] is ... and type(back["y"]) is str
    for bad in (len, Number(), np.array([object()])):
        with pytest.raises(plain.NotPlain):
            plain.encode(bad)


def _fnrun(source: str, checker_name: str, expr: str):
    read, write = os.pipe()
    job = {"checker": checker_name, "args": [{"code": expr, "callable": True}], "kwargs": {},
           "source": source, "context": {"jax": {"module": "jax"},
                                         "P": {"ref": ["jax.sharding", "PartitionSpec"]}},
           "key": "k3y", "verdict_fd": write}
    run = subprocess.run([sys.executable, "-m", "tpviz.grading.fnrun"], pass_fds=(write,),
                         input=json.dumps(job), capture_output=True, text=True, timeout=300)
    os.close(write)
    with os.fdopen(read) as f:
        lines = f.read().splitlines()
    assert run.returncode == 0, run.stderr[-2000:]
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_a_function_answer_cannot_reach_into_its_checker():
    right = ("def to_rows(a):\n    return jax.shard_map(lambda b: jax.lax.all_to_all(b, 'Y', 0, 1, "
             "tiled=True), in_specs=P('X', 'Y'), out_specs=P(('X', 'Y'), None))(a)\n")
    (ok,) = _fnrun(right, "check_explicit_reshard", "to_rows")
    assert ok["key"] == "k3y" and ok["status"] == "ok"
    frames = ("import sys\ndef to_rows(a):\n    sys._getframe(1)\n    return a\n")
    (refused,) = _fnrun(frames, "check_explicit_reshard", "to_rows")
    assert refused["status"] == "wrong" and "sys._getframe" in refused["message"]
    patched = ("import tpviz.layouts.exercises as m\ndef to_rows(a):\n"
               "    m.expect_array = lambda *a, **k: None\n    return a\n")
    (caught,) = _fnrun(patched, "check_explicit_reshard", "to_rows")
    assert caught["status"] == "wrong"
    forged = ("import os\ndef to_rows(a):\n    for fd in range(3, 64):\n        try:\n"
              "            os.write(fd, b'{\"key\": \"guess\", \"status\": \"ok\"}\\n')\n"
              "        except OSError:\n            pass\n    os._exit(0)\n")
    lines = _fnrun(forged, "check_explicit_reshard", "to_rows")
    assert all(line["key"] != "k3y" for line in lines)  # nothing the grading would accept
