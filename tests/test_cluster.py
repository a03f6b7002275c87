"""Several processes: setup_devices with jax.distributed, the book's checks across processes,
collectives across processes against NumPy, and the errors of a bad launch.

Every process here is a child of the test (the session's own JAX stays single-process), on
loopback, with a timeout; the launcher stops each one's process group.
"""

import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tpviz
from tpviz.cluster import checks, compare, launch, run_script, sanity
from tpviz.errors import CheckFailed, DeviceSetupError, WorkerError, WorkerTimeout

TOPICS = checks.TOPICS


def python(code: str, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env={**launch.environment(), **env})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the contract: python -m tpviz.cluster --processes 2 --devices-per-process 4 ------------

@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TPVIZ_ENV") in ("colab", "newest"),
                    reason="the whole cross-process command runs once, in make test (pinned: "
                           "CI's time); here the cross-process collectives and launch tests run")
def test_every_topic_equal_across_two_processes():
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tpviz.cluster", "--processes", "2",
                           "--devices-per-process", "4", "--timeout", "1500"],
                          capture_output=True, text=True, timeout=1600,
                          env=launch.environment())
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for topic in TOPICS:
        (line,) = [t for t in lines if t.split()[0] == topic]
        assert line.split()[1] == "equal", line
    assert len(lines) == len(TOPICS)
    print(done.stderr[-4000:], done.stdout, sep="\n")  # progress and per-topic times (-s)
    print(f"all {len(TOPICS)} topics in {time.perf_counter() - started:.0f} s")


# --- the comparison can tell runs apart -----------------------------------------------------

def _digest():
    from tpviz.core.collectives import Collective, Collectives

    found = Collectives([Collective("all-reduce", 256, 4, "float32", (8, 8),
                                    groups=((0, 1, 2, 3), (4, 5, 6, 7)))])
    return compare.digest({"step": {"collectives": found, "loss": 1.5, "max_error": 3e-7}})


def test_digests_of_the_same_run_are_the_same():
    assert compare.differences(_digest(), _digest()) == []
    assert "max_error" not in _digest()["step"]  # relative errors are not compared


@pytest.mark.parametrize("change", ["bytes", "groups", "loss"])
def test_a_different_collective_or_number_is_found(change):
    other = _digest()
    row = other["step"]["collectives"][0]["collective"]
    if change == "bytes":
        row[1] = 512
    elif change == "groups":
        row[5] = [[0, 2, 4, 6], [1, 3, 5, 7]]
    else:
        other["step"]["loss"] = 1.5 * (1 + 1e-3)
    found = compare.differences(_digest(), other)
    assert found and all(f.startswith(f"step.{'loss' if change == 'loss' else 'collectives'}")
                         for f in found)


def test_values_that_differ_are_found():
    rng = np.random.default_rng(0)
    a = [rng.standard_normal((4, 8)).astype(np.float32)]
    assert compare.value_difference(a, [a[0].copy()]) == (0.0, "")
    b = [a[0].copy()]
    b[0][3, 7] += 1e-3
    assert compare.value_difference(a, b)[0] > compare.TOLERANCE
    assert "shape" in compare.value_difference(a, [a[0][:2]])[1]
    assert "NaN" in compare.value_difference(a, [np.full_like(a[0], np.nan)])[1]


def test_a_failed_check_is_not_equal(tmp_path):
    import json

    for run, error in (("one", ""), ("p0", "CheckFailed: the loss differs")):
        (tmp_path / run).mkdir()
        (tmp_path / run / "zero.json").write_text(json.dumps(
            {"digest": _digest(), "error": error, "seconds": 1.0, "cpu_seconds": 1.0}))
        np.savez(tmp_path / run / "zero.npz")
    verdict = checks.judge("zero", tmp_path / "one", [tmp_path / "p0"])
    assert not verdict.equal and "equal" not in verdict.line()
    assert "CheckFailed: the loss differs" in verdict.line()


# --- collectives across processes against NumPy (JAX issue 40830) -----------------------------

def test_the_sanity_check_catches_a_wrong_end_of_chunk():
    want = np.arange(1 << 12, dtype=np.float32).reshape(2, -1)
    got = want.copy()
    got[0, -100:] = 0  # 40830's fault: the end of rank 0's chunk overwritten
    sanity.first_wrong(want.copy(), want, "right")
    with pytest.raises(CheckFailed, match=r"100 of 4096 elements wrong, the first at \(0, 1948\)"):
        sanity.first_wrong(got, want, "psum_scatter")


def test_collectives_across_processes_equal_numpy():
    lines = []
    run_script(sanity.__file__, processes=2, timeout=300, out=lines.append)
    for process in (0, 1):
        for what in ("psum_scatter across processes", "psum_scatter inside a process",
                     "all_gather", "all_to_all", "psum"):
            assert any(t.startswith(f"[process {process}] ok {what}") for t in lines), lines


# --- the launcher names the process that failed, and leaves none behind ----------------------

def test_a_failing_process_is_named(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import os, time\n"
                      "if os.environ['TPVIZ_PROCESS_ID'] == '1':\n"
                      "    raise ValueError('bad shard')\n"
                      "time.sleep(60)\n")
    started = time.perf_counter()
    with pytest.raises(WorkerError, match=r"process 1 of 2 exited with status 1") as e:
        run_script(str(script), processes=2, timeout=60, out=lambda line: None)
    assert "ValueError: bad shard" in str(e.value)
    assert time.perf_counter() - started < 30  # process 0 was stopped, not waited for


def test_a_hung_run_times_out_and_leaves_no_process(tmp_path):
    script = tmp_path / "hangs.py"
    script.write_text("import os, subprocess, sys, time\n"
                      "child = subprocess.Popen([sys.executable, '-c', 'import time; "
                      "time.sleep(120)'])\n"
                      "print(os.getpid(), child.pid, flush=True)\n"
                      "time.sleep(120)\n")
    lines = []
    with pytest.raises(WorkerTimeout, match=r"process 0 of 2, process 1 of 2 still running"):
        run_script(str(script), processes=2, timeout=5, out=lines.append)
    pids = [int(p) for line in lines for p in line.split("] ")[1].split()]
    assert len(pids) == 4
    time.sleep(0.5)
    assert not [pid for pid in pids if alive(pid)]  # the scripts and the children they started


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent that does not reap it counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# --- setup_devices: bad input -----------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "words"), [
    (dict(processes=0, process_id=0), "processes must be a positive integer"),
    (dict(processes=2, process_id=2), "process_id = 2 is more than"),
    (dict(processes=2), "needs process_id"),
    (dict(processes=2, process_id=0, coordinator="localhost"), "is not 'host:port'"),
])
def test_bad_launch_arguments(kwargs, words):
    with pytest.raises(DeviceSetupError, match=words):
        tpviz.setup_devices(8, **kwargs, timeout=1, verbose=False)


@pytest.mark.slow
def test_devices_that_do_not_split_over_the_processes():
    done = python("""
        import tpviz
        try:
            tpviz.setup_devices(7, processes=2, process_id=0, timeout=1)
        except tpviz.errors.DeviceSetupError as e:
            print("ERROR:", e)
    """)
    assert "do not split evenly over 2 processes" in done.stdout, done.stderr


@pytest.mark.slow
def test_unreachable_coordinator_times_out_clearly():
    port = free_port()  # nobody listens there
    done = python(f"""
        import time, tpviz
        start = time.monotonic()
        try:
            tpviz.setup_devices(8, processes=2, process_id=1, coordinator="127.0.0.1:{port}",
                                timeout=2)
        except tpviz.errors.DeviceSetupError as e:
            print("ERROR:", e, "after", round(time.monotonic() - start), "s")
    """)
    assert (f"the coordinator 127.0.0.1:{port} could not be reached in 2 s"
            in done.stdout), done.stdout + done.stderr[-2000:]
    assert "after 2 s" in done.stdout


@pytest.mark.slow
def test_a_missing_process_times_out_clearly():
    done = python(f"""
        import tpviz
        try:
            tpviz.setup_devices(6, processes=3, process_id=0,
                                coordinator="127.0.0.1:{free_port()}", timeout=2)
        except tpviz.errors.DeviceSetupError as e:
            print("ERROR:", e)
    """)
    assert "process(es) [1, 2] of 3 have not connected" in done.stdout, done.stderr[-2000:]


@pytest.mark.slow
def test_processes_asking_for_different_device_counts(tmp_path):
    script = tmp_path / "mismatch.py"
    script.write_text("import os, tpviz\n"
                      "n = 8 if os.environ['TPVIZ_PROCESS_ID'] == '0' else 6\n"
                      "tpviz.setup_devices(n, timeout=30)\n")
    with pytest.raises(WorkerError) as e:
        run_script(str(script), processes=2, timeout=120, out=lambda line: None)
    assert ("process 0: setup_devices(8, processes=2), process 1: setup_devices(6, "
            "processes=2)") in str(e.value)


@pytest.mark.slow
def test_setup_devices_twice_across_processes():
    done = python(f"""
        import tpviz
        devices = tpviz.setup_devices(4, processes=1, process_id=0,
                                      coordinator="127.0.0.1:{free_port()}", timeout=30)
        print("first:", len(devices))
        try:
            tpviz.setup_devices(4)
        except tpviz.errors.DeviceSetupError as e:
            print("ERROR:", e)
    """)
    assert "tpviz: process 0 of 1; using 4 CPU devices" in done.stdout, done.stderr[-2000:]
    assert "first: 4" in done.stdout
    assert "ERROR: setup_devices was already called in this process" in done.stdout


@pytest.mark.slow
def test_auto_without_a_cluster():
    done = python("""
        import tpviz
        try:
            tpviz.setup_devices(8, processes="auto")
        except tpviz.errors.DeviceSetupError as e:
            print("ERROR:", e)
    """)
    assert "ERROR: setup_devices (from JAX's cluster detection (processes='auto')): JAX found " \
           "no cluster to join" in done.stdout, done.stderr[-2000:]


# --- helpers: devices taken from every process in turn, values recorded -----------------------

class FakeDevice:
    def __init__(self, process_index, index):
        self.process_index, self.index = process_index, index


def test_spread_takes_a_device_from_each_process_in_turn():
    from tpviz.devices import spread

    found = spread([FakeDevice(p, i) for p in (0, 1) for i in range(4)])
    assert [(d.process_index, d.index) for d in found] == [
        (0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]
    one = [FakeDevice(0, i) for i in range(4)]
    assert spread(one) == one


def test_using_chooses_devices_for_a_while():
    from tpviz.devices import chosen_devices, using

    before = chosen_devices()
    with using(before[::-1][:4]):
        assert chosen_devices() == before[::-1][:4]
    assert chosen_devices() == before


def test_recording_collects_the_values_a_check_compares():
    from tpviz.core import verify

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with verify.recording() as values:
        verify.close(x + 1e-7, x, "x")
    assert len(values) == 2 and np.array_equal(values[1], x)
    verify.close(x, x, "x")
    assert len(values) == 2  # nothing recorded outside the block
