"""tpviz.compat: each spelling does the same thing on every supported version (these tests run in
the pinned, colab (JAX 0.7.2, ipywidgets 7.7.1) and newest environments)."""

import types

import ipywidgets as widgets
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz import compat
from tpviz.core.compiled import collectives
from tpviz.devices import chosen_devices


def test_versions_names_the_running_jax():
    import jaxlib

    assert compat.versions() == f"JAX {jax.__version__} (jaxlib {jaxlib.__version__})"
    assert compat.JAX_VERSION >= (0, 7, 2)


def test_all_gather_invariant_leaves_shard_map_replicated():
    mesh = tpviz.make_mesh((8,), ("X",))
    x = np.arange(8 * 3 * 2, dtype=np.float32).reshape(8 * 3, 2)

    def gather(block):  # block: f32[3, 2]
        return compat.all_gather_invariant(block, "X", axis=0, tiled=True)  # f32[24, 2]

    program = jax.shard_map(gather, mesh=mesh, in_specs=P("X"), out_specs=P())  # check_vma on
    np.testing.assert_array_equal(program(x), x)  # every device holds the whole array
    ops = collectives(program, x)
    assert [(c.kind, c.bytes, c.group_size) for c in ops] == [("all-gather", x.nbytes, 8)]


def test_pvary_makes_an_invariant_value_varying():
    mesh = tpviz.make_mesh((8,), ("X",))
    seen = {}

    def body(b):  # b: f32[2], the same on every device (invariant)
        v = compat.pvary(b, "X")
        seen["b"], seen["v"] = compat.varying_axes(b), compat.varying_axes(v)
        return v * (jax.lax.axis_index("X") + 1)  # f32[2], different on every device

    out = jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P("X"))(jnp.ones(2))
    assert seen == {"b": frozenset(), "v": frozenset({"X"})}
    np.testing.assert_array_equal(out, np.repeat(np.arange(1, 9), 2))


def test_device_name_is_platform_and_id():
    assert [compat.device_name(d) for d in chosen_devices()[:2]] == ["cpu:0", "cpu:1"]


def test_backends_have_started_in_the_test_session():
    jnp.ones(1).block_until_ready()
    assert compat.backends_started()


def test_widget_bundle_points_the_front_end_at_the_widget_model():
    w = widgets.IntSlider(value=3)
    bundle = compat.widget_bundle(w)
    view = bundle[compat.WIDGET_VIEW]
    assert (view["version_major"], view["version_minor"], view["model_id"]) == (2, 0, w.model_id)
    assert "IntSlider" in bundle["text/plain"]


def test_widget_bundle_without_repr_mimebundle_as_in_ipywidgets_7():
    old = types.SimpleNamespace(model_id="abc123")  # ipywidgets 7 widgets have no such method
    bundle = compat.widget_bundle(old)
    assert bundle[compat.WIDGET_VIEW] == {"version_major": 2, "version_minor": 0,
                                          "model_id": "abc123"}
    assert bundle["text/plain"]
