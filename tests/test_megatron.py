"""Megatron tensor parallelism: exact forward and backward, and the all-reduces the chapter
promises, read from the compiled programs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz import megatron
from tpviz.devices import chosen_devices
from tpviz.errors import ShardingError
from tpviz.megatron import draw

N = 4


@pytest.fixture(scope="module")
def mesh():
    return tpviz.make_mesh((N,), ("model",), devices=chosen_devices()[:N])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 32), dtype=np.float32)
    target = rng.standard_normal((2, 8, 32), dtype=np.float32)
    return x, target, megatron.init(32, 128)


def test_f_is_identity_forward_and_all_reduce_backward(mesh):
    x = np.arange(3, dtype=np.float32)
    w = np.arange(1, N + 1, dtype=np.float32)  # device d multiplies by d + 1

    def per_device(x, w):
        y = megatron.f(x, "model")
        return y, jax.grad(lambda x: jnp.sum(megatron.f(x, "model") * w))(x)

    y, grad = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P("model")),
                            out_specs=(P(), P()), check_vma=False)(x, w)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(grad, np.full(3, w.sum()))  # 1 + 2 + 3 + 4: summed over devices


def test_g_is_all_reduce_forward_and_identity_backward(mesh):
    x = np.arange(N * 2, dtype=np.float32).reshape(N, 2)  # device d holds row d

    def per_device(x):
        return megatron.g(x, "model"), jax.grad(lambda x: jnp.sum(megatron.g(x, "model")))(x)

    y, grad = jax.shard_map(per_device, mesh=mesh, in_specs=P("model"),
                            out_specs=(P(), P("model")), check_vma=False)(x)
    np.testing.assert_array_equal(y, x.sum(0, keepdims=True))
    np.testing.assert_array_equal(grad, np.ones_like(x))  # not N: the backward is the identity


@pytest.mark.parametrize(("kind", "forward", "step"), [("mlp", 1, 2), ("block", 2, 4)])
def test_sharded_model_is_exact_with_the_planned_all_reduces(mesh, data, kind, forward, step):
    x, target, params = data
    if kind == "mlp":
        params = {k: params[k] for k in ("a", "b")}
    c = megatron.check(kind, mesh, x, target, params, head_dim=8)
    assert c.max_error < 1e-5
    element = x.size * 4  # batch x sequence x hidden float32 elements
    assert [(k.kind, k.bytes, k.group_size) for k in c.forward] == [("all-reduce", element, N)] * forward
    assert [(k.kind, k.bytes, k.group_size) for k in c.train] == [("all-reduce", element, N)] * step
    assert c.weight_bytes_per_device * N == sum(v.nbytes for v in params.values())
    # the compiler, given only the weights' shardings, also communicates with all-reduces only
    assert set(c.gspmd.kinds()) == {"all-reduce"}


def test_without_conjugate_operators_the_gradients_are_wrong(mesh, data):
    x, target, params = data
    a, b = params["a"], params["b"]

    def per_device(x, a, b):  # the MLP with a bare psum and no f: what f and g exist to fix
        def loss(x, a, b):
            return jnp.mean((jax.lax.psum(jax.nn.gelu(x @ a) @ b, "model") - target) ** 2)

        return jax.grad(loss, argnums=(0, 1, 2))(x, a, b)

    gx, ga, gb = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(None, "model"), P("model", None)),
                               out_specs=(P(), P(None, "model"), P("model", None)), check_vma=False)(x, a, b)
    _, (rx, rp) = megatron.reference_step("mlp", x, target, {"a": a, "b": b})
    np.testing.assert_allclose(ga, N * rp["a"], rtol=1e-3, atol=1e-7)  # psum backward: N copies
    np.testing.assert_allclose(gb, N * rp["b"], rtol=1e-3, atol=1e-7)
    assert not np.allclose(gx, N * rx, rtol=1e-2) and not np.allclose(gx, rx, rtol=1e-2)


def test_plan_shapes_bytes_and_communication():
    p = megatron.plan(tokens=2048, hidden=1024, ffn=4096, heads=16, devices=4, dtype="bf16")
    assert p.weights["a"] == ((1024, 4096), (1024, 1024))
    assert p.weights["b"] == ((4096, 1024), (1024, 1024))
    assert p.weights["wq"] == ((1024, 1024), (1024, 256))  # 4 of 16 heads, 64 dims each
    assert p.weights["wo"] == ((1024, 1024), (256, 1024))
    assert p.weight_bytes == 12 * 1024 * 1024 * 2 and p.weight_bytes_per_device == p.weight_bytes // 4
    assert p.all_reduce_bytes == 2048 * 1024 * 2
    assert p.ring_bytes_per_step == 4 * 2 * 3 / 4 * 2048 * 1024 * 2


@pytest.mark.parametrize(("args", "words"), [((64, 96, 256, 6, 4), "6 heads do not split over 4"),
                                             ((64, 64, 250, 8, 4), "250 is not divisible by 4"),
                                             ((64, 60, 256, 8, 4), "not divisible by 8 heads"),
                                             ((0, 64, 256, 8, 4), "tokens must be a positive")])
def test_plan_bad_input(args, words):
    with pytest.raises(ShardingError, match=words):
        megatron.plan(*args)


def test_drawings_state_the_plan():
    p = megatron.plan(64, 64, 256, 8, 4, "bf16")
    fig = draw.mlp(p)
    assert "A[64, 64] and B[64, 64] = 16,384 bytes (1/4 of the MLP)" in fig._suptitle.get_text()
    assert [ax.get_title() for ax in fig.axes] == ["X: all", "A: columns", "H = gelu(X A)", "B: rows",
                                                  "Z: all-reduced"]
    assert "2 all-reduces forward (g), 2 backward (f)" in draw.timeline("block").axes[0].get_title(loc="left")
