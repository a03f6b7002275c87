"""Answers that read or fake the answer, and function answers that reach into their checker
(issue 41), checked without a class: the plain-value conversion, the checkers it protects, the
plain data that leaves a sandbox, and the function runner's guard."""

import json
import os
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

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
    """The verdict lines a function answer's check writes (one fork of tpviz.grading.fnserve)."""
    job = {"checker": checker_name, "args": [{"code": expr, "callable": True}], "kwargs": {},
           "source": source, "context": {"jax": {"module": "jax"},
                                         "P": {"ref": ["jax.sharding", "PartitionSpec"]}},
           "key": "k3y", "seconds": 300}
    run = subprocess.run([sys.executable, "-P", "-m", "tpviz.grading.fnserve", checker_name],
                         input=json.dumps(job) + "\n", capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    (reply,) = [json.loads(line) for line in run.stdout.splitlines()]
    assert not reply["more"] and not reply["timed_out"]  # outside a sandbox: one job, then out
    return [json.loads(line) for line in reply["verdict"].splitlines()]


def _wait_for_process(cmdline: bytes, seconds: float = 180) -> None:
    """Wait until a process of this machine (any sandbox's included) runs ``cmdline``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == cmdline:
                    return
            except OSError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"no process ran {cmdline!r} within {seconds} s")


def _sandbox():
    pytest.importorskip("nbgrader", reason="the instructor extra: pip install -e '.[instructor]'")
    from tpviz.grading.isolate import Sandbox

    return Sandbox()


# 0.5's answer: a manual all-to-all of one block along Y
BODY = ("    return jax.shard_map(lambda b: jax.lax.all_to_all(b, 'Y', 0, 1, tiled=True), "
        "in_specs=P('X', 'Y'), out_specs=P(('X', 'Y'), None))(a)\n")
RIGHT = "def to_rows(a):\n" + BODY
# a process started past the audit hook (Python 3.11's _posixsubprocess raises no event)
SPAWN = ("def spawn(*argv):\n    import _posixsubprocess, os\n    r, w = os.pipe()\n"
         "    _posixsubprocess.fork_exec(list(argv), [argv[0].encode()], True, (), None, None, "
         "-1, -1, -1, -1, -1, -1, r, w, False, True, -1, None, None, None, -1, None, False)\n")


@pytest.mark.slow
def test_a_function_answer_cannot_reach_into_its_checker_or_the_next():
    """Outside a sandbox, the function runner checks one answer and exits. In a submission's
    sandbox it checks each answer in a fork of one process: an answer cannot read the checker's
    frames, replace the library or forge its verdict, and what one leaves (a process started
    past the audit hook, a file, an endless compiled loop, the killed parent) is gone before the
    next one is checked, which passes."""
    from types import SimpleNamespace

    from tpviz.grading import inner
    from tpviz.grading.jobs import PHASE_B, function_verdict

    (ok,) = _fnrun(RIGHT, "check_explicit_reshard", "to_rows")
    assert ok["key"] == "k3y" and ok["status"] == "ok"
    sandbox = _sandbox()
    command = [*PHASE_B, "check_explicit_reshard"]
    checks, other = inner.Server(sandbox, command, 300), inner.Server(sandbox, command, 300)
    ex = SimpleNamespace(checker="check_explicit_reshard")

    def verdict(source, seconds=120, server=checks):
        data = {"args": [{"code": "to_rows", "callable": True}], "kwargs": {}, "source": source,
                "context": {"jax": {"module": "jax"},
                            "P": {"ref": ["jax.sharding", "PartitionSpec"]}}}
        return function_verdict(server, ex, data, seconds)

    frames = "import sys\ndef to_rows(a):\n    sys._getframe(1)\n    return a\n"
    patched = ("import tpviz.layouts.exercises as m\ndef to_rows(a):\n"
               "    m.expect_array = lambda *a, **k: None\n    return a\n")
    forged = ("import os\ndef to_rows(a):\n    for fd in range(3, 64):\n        try:\n"
              "            os.write(fd, b'{\"key\": \"guess\", \"status\": \"ok\"}\\n')\n"
              "        except OSError:\n            pass\n    os._exit(0)\n")
    clean = ("import os\ndef to_rows(a):\n"
             "    procs = [p for p in os.listdir('/proc') if p.isdigit()]\n"
             "    assert len(procs) == 3 and not os.listdir('/tmp/home'), (procs, os.listdir('/tmp'))\n"
             + BODY)
    leave = (SPAWN + "import jax\ndef to_rows(a):\n    open('/tmp/home/left', 'w').write('x')\n"
             "    spawn('/bin/sleep', '600')\n    with jax.ensure_compile_time_eval():  # runs now\n"
             "        jax.jit(lambda x: jax.lax.while_loop(lambda c: c > -1.0, lambda c: c + 1.0, "
             "x))(0.0).block_until_ready()\n")
    stop = (SPAWN + "def to_rows(a):\n    spawn('/bin/kill', '-9', '2')\n"
            "    import time\n    time.sleep(30)\n")
    # state an answer leaves in the process (modules, builtins, a device array, an import),
    # and what the next one finds of it: nothing, as in a fresh process
    state = ("import builtins, sys, tabnanny, jax, jax.numpy as jnp, tpviz\ndef to_rows(a):\n"
             "    builtins.left = jax.left = tpviz.left = 1\n"
             "    sys.modules['left_module'] = sys\n    with jax.ensure_compile_time_eval():\n"
             "        jax.kept = jnp.full((3,), 12345.0)  # a real array, made under jit\n"
             + BODY)
    snoop = ("import builtins, sys, jax, tpviz\ndef to_rows(a):\n"
             "    left = [m for m in (builtins, jax, tpviz) if hasattr(m, 'left')]\n"
             "    left += [n for n in ('left_module', 'tabnanny') if n in sys.modules]\n"
             "    left += [x for x in jax.live_arrays() if x.size == 3]\n"
             "    assert not left, left\n"
             + BODY)
    try:
        status, message = verdict(frames)
        assert status == "wrong" and "sys._getframe" in message
        assert verdict(patched)[0] == "wrong"
        status, message = verdict(forged)
        assert status == "wrong" and "did not report normally" in message
        if sys.version_info[:2] == (3, 11):  # the answers start processes the 3.11 way
            status, message = verdict(leave, seconds=15)
            assert status == "wrong" and "took more than 15 s" in message
            assert verdict(clean) == verdict(RIGHT)  # the same process: nothing left behind
            status, message = verdict(stop)
            assert status == "wrong" and "did not report" in message
        assert verdict(clean)[0] == "ok"
        assert verdict(state)[0] == "ok" and verdict(snoop)[0] == "ok"
        both = (state.replace("def to_rows", "def leave") +  # snoop sees state in its process
                snoop.replace("    left = [m", "    leave(a)\n    left = [m"))
        status, message = verdict(both)
        assert status == "wrong" and "left_module" in message and "12345" in message
        if sys.version_info[:2] == (3, 11):  # two submissions at once (--workers 2): while
            # one's check runs, with a file and a process of its own, the other's sees neither
            busy = (SPAWN + "def to_rows(a):\n    open('/tmp/home/mine', 'w').write('x')\n"
                    "    spawn('/bin/sleep', '617')\n    import time\n    time.sleep(200)\n")
            first = threading.Thread(target=verdict, args=(busy, 250), daemon=True)
            first.start()
            _wait_for_process(b"/bin/sleep\x00617\x00")
            assert verdict(clean, server=other)[0] == "ok"
    finally:
        checks.close()
        other.close()


LIMITS = """
import resource, numpy as np
print(resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_NPROC)[0])
small = np.ones(2**24)  # 128 MiB
try:
    big = np.ones(2**29)  # 4 GiB, past the sandbox's 3
    print("allocated")
except MemoryError:
    print("refused")
"""


@pytest.mark.parametrize("unsafe", [False, True])
def test_a_sandbox_caps_each_process_memory_and_the_users_processes(unsafe):
    """A submission allocating past its cap fails there (a MemoryError in its own process),
    not the machine; the cap on processes sits above the user's own count (Linux exempts root
    from it, so only its value can be checked here)."""
    import subprocess
    import sys

    pytest.importorskip("nbgrader", reason="the instructor extra: pip install -e '.[instructor]'")
    from tpviz.grading.isolate import PROCESSES, Sandbox, default_memory

    assert default_memory(workers=1) >= default_memory(workers=4) >= 6 * 2**30
    sandbox = Sandbox(memory=3 * 2**30, unsafe=unsafe)
    run = sandbox.popen([sys.executable, "-c", LIMITS], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    out, err = run.communicate(timeout=120)
    memory, processes, verdict = out.split()
    assert int(memory) == 3 * 2**30 and verdict == "refused", err
    assert PROCESSES < int(processes) < 10**6


@pytest.mark.slow
@pytest.mark.parametrize("stand_in", ["functools.partial(jax.lax.all_to_all)",
                                      "functools.lru_cache(None)(jax.lax.all_to_all)"])
def test_a_library_function_swapped_for_a_stand_in_voids_the_check(stand_in):
    """Not only objects of the learner's own classes: any object put where a library function
    was (a partial, a cache around it) makes the check not count, though the program is
    right. (A unittest.mock import is refused earlier: it reads frames.)"""
    source = f"import functools\nimport jax\njax.lax.all_to_all = {stand_in}\n"
    (verdict,) = _fnrun(source + RIGHT, "check_explicit_reshard", "to_rows")
    assert verdict["status"] == "wrong" and "replaced part of the library" in verdict["message"]


@pytest.mark.slow
def test_a_checkers_declaration_changed_in_place_voids_the_check():
    """The checker's own data (its frozen Build: the layout and collectives it expects) changed
    in place with object.__setattr__, which rebinds no module name: the wrong function that
    then matches it does not pass (a reviewer's exploit, ✓ before the fix)."""
    source = ("import tpviz.layouts.exercises as E\n"
              "for k, v in dict(manual=False, out='A[I_X, J_Y]',\n"
              "                 collectives=lambda case: []).items():\n"
              "    object.__setattr__(E.RESHARD, k, v)\n"
              "def to_rows(a):\n    return a\n")
    (verdict,) = _fnrun(source, "check_explicit_reshard", "to_rows")
    assert verdict["status"] == "wrong" and "replaced part of the library" in verdict["message"]
