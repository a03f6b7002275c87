import subprocess
import sys
import textwrap

import jax
import pytest

import tpviz
from tpviz.devices import chosen_devices
from tpviz.errors import DeviceSetupError, ShardingError


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_setup_is_idempotent_in_a_started_session():
    assert len(tpviz.setup_devices(8, verbose=False)) == 8
    try:
        assert len(tpviz.setup_devices(4, verbose=False)) == 4  # a subset of the running devices
        assert tpviz.make_mesh((4,), ("X",)).size == 4
    finally:
        tpviz.setup_devices(8, verbose=False)


def test_asking_for_more_devices_after_jax_started_says_restart():
    with pytest.raises(DeviceSetupError, match="Restart the kernel"):
        tpviz.setup_devices(16, verbose=False)


@pytest.mark.parametrize(("n", "error", "words"),
                         [(0, DeviceSetupError, "positive integer"),
                          (-2, DeviceSetupError, "positive integer"),
                          (2.5, TypeError, "must be an integer, got 2.5"),
                          (True, TypeError, "must be an integer, got True")])
def test_bad_device_count(n, error, words):
    with pytest.raises(error, match=words):
        tpviz.setup_devices(n)


@pytest.mark.slow
def test_works_after_importing_jax_first():
    result = run_python("""
        import jax, jax.numpy as jnp
        import tpviz
        devices = tpviz.setup_devices(4)
        assert len(devices) == 4 and len(jax.devices("cpu")) == 4
        print(float(jnp.ones(3).sum()))
    """)
    assert result.returncode == 0, result.stderr
    assert "tpviz: using 4 emulated CPU devices." in result.stdout
    assert "3.0" in result.stdout


@pytest.mark.slow
def test_after_a_computation_ran_it_says_restart():
    result = run_python("""
        import jax.numpy as jnp
        import tpviz
        jnp.ones(3).sum().block_until_ready()
        try:
            tpviz.setup_devices(8)
        except tpviz.errors.DeviceSetupError as e:
            print("ERROR:", e)
    """)
    assert result.returncode == 0, result.stderr
    assert "ERROR:" in result.stdout and "Restart the kernel" in result.stdout


def test_make_mesh_has_explicit_axis_types():
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))
    assert dict(mesh.shape) == {"X": 2, "Y": 4}
    assert mesh.axis_types == (jax.sharding.AxisType.Auto,) * 2
    explicit = tpviz.make_mesh((8,), ("X",), axis_types=(jax.sharding.AxisType.Explicit,))
    assert explicit.axis_types == (jax.sharding.AxisType.Explicit,)


@pytest.mark.parametrize(
    ("args", "words"),
    [(((4, 4), ("X", "Y")), "needs 16 devices but only 8"),
     (((2, 2), ("X", "Y")), "pass devices=devices\\[:4\\]"),
     (((2, 4), ("X",)), "one name per axis"),
     (((2, 4), ("X", "X")), "repeat a name")],
)
def test_make_mesh_errors(args, words):
    with pytest.raises(ShardingError, match=words):
        tpviz.make_mesh(*args)


def test_make_mesh_on_a_subset():
    mesh = tpviz.make_mesh((2, 2), ("X", "Y"), devices=chosen_devices()[:4])
    assert mesh.size == 4


def test_fallback_line_names_the_accelerators_it_does_not_use():
    from types import SimpleNamespace

    from tpviz.devices import _fallback_line

    tpu = SimpleNamespace(platform="tpu", id=0, device_kind="TPU v6 lite")  # Colab's TPU runtime
    assert _fallback_line(8, [tpu]) == ("tpviz: using 8 emulated CPU devices; this runtime's 1 TPU "
                                        "(tpu:0, TPU v6 lite) is fewer than the 8 asked for.")
    gpus = [SimpleNamespace(platform="gpu", id=i, device_kind="Tesla T4") for i in range(4)]
    assert _fallback_line(8, gpus) == ("tpviz: using 8 emulated CPU devices; this runtime's 4 GPUs "
                                       "(gpu:0 … gpu:3, Tesla T4) are fewer than the 8 asked for.")
    assert _fallback_line(8, []) == "tpviz: using 8 emulated CPU devices."
