"""Megatron tensor parallelism: exact forward and backward, and the all-reduces the chapter
promises, read from the compiled programs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from checking import fails as _fails
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


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "forward", "step"), [("mlp", 1, 2), ("block", 2, 4)])
def test_sharded_model_is_exact_with_the_planned_all_reduces(mesh, data, kind, forward, step):
    x, target, params = data
    if kind == "mlp":
        params = {k: params[k] for k in ("w1", "w2")}
    c = megatron.check(kind, mesh, x, target, params, head_dim=8)
    assert c.max_error < 1e-5
    element = x.size * 4  # batch x sequence x hidden float32 elements
    assert [(k.kind, k.bytes, k.group_size) for k in c.forward] == [("all-reduce", element, N)] * forward
    assert [(k.kind, k.bytes, k.group_size) for k in c.train] == [("all-reduce", element, N)] * step
    assert c.weight_bytes_per_device * N == sum(v.nbytes for v in params.values())
    # the compiler, given only the weights' shardings, also communicates with all-reduces only
    assert set(c.gspmd.kinds()) == {"all-reduce"}


@pytest.mark.slow
def test_without_conjugate_operators_the_gradients_are_wrong(mesh, data):
    x, target, params = data
    a, b = params["w1"], params["w2"]

    def per_device(x, a, b):  # the MLP with a bare psum and no f: what f and g exist to fix
        def loss(x, a, b):
            return jnp.mean((jax.lax.psum(jax.nn.gelu(x @ a) @ b, "model") - target) ** 2)

        return jax.grad(loss, argnums=(0, 1, 2))(x, a, b)

    gx, ga, gb = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(None, "model"), P("model", None)),
                               out_specs=(P(), P(None, "model"), P("model", None)), check_vma=False)(x, a, b)
    _, (rx, rp) = megatron.reference_step("mlp", x, target, {"w1": a, "w2": b})
    np.testing.assert_allclose(ga, N * rp["w1"], rtol=1e-3, atol=1e-7)  # psum backward: N copies
    np.testing.assert_allclose(gb, N * rp["w2"], rtol=1e-3, atol=1e-7)
    assert not np.allclose(gx, N * rx, rtol=1e-2) and not np.allclose(gx, rx, rtol=1e-2)


def test_plan_shapes_bytes_and_communication():
    p = megatron.plan(tokens=2048, hidden=1024, ffn=4096, heads=16, devices=4, dtype="bf16")
    assert p.weights["w1"] == ((1024, 4096), (1024, 1024))
    assert p.weights["w2"] == ((4096, 1024), (1024, 1024))
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
    words = " ".join(fig._suptitle.get_text().split())  # line breaks fit the column
    assert "W1[64, 64] and W2[64, 64] = 16,384 bytes (1/4 of the MLP)" in words
    # T = 64 tokens, H = 64, F = 256: each array's shape under its name
    (ax,) = fig.axes  # one Axes: the arrays are its panels, each titled above its blocks
    assert [" ".join(t.get_text().split()) for t in ax.texts if "×" in t.get_text()] == [
        "In: all 64×64", "W1: columns 64×256", "Tmp = gelu(In W1) 64×256",
        "W2: rows 256×64", "Out: all-reduced 64×64"]
    assert "2 all-reduces forward (g), 2 backward (f)" in draw.timeline("block").axes[0].get_title(loc="left")


@pytest.mark.slow
def test_the_axis_argument_is_honoured_everywhere(data):
    x, target, params = data
    mesh = tpviz.make_mesh((4,), ("tp",), devices=tpviz.devices.chosen_devices()[:4])
    mlp = {k: params[k] for k in ("w1", "w2")}
    placed = megatron.place("mlp", mesh, mlp, axis="tp")
    y = megatron.forward("mlp", mesh, axis="tp")(x, placed)
    np.testing.assert_allclose(y, megatron.mlp(x, mlp["w1"], mlp["w2"]), rtol=1e-5, atol=1e-5)
    c = megatron.check("block", mesh, x, target, params, head_dim=8, axis="tp")
    assert [k.kind for k in c.train] == ["all-reduce"] * 4  # 2 blocks halves × (g, f)
    assert megatron.specs("block", "tp")["wo"] == P("tp", None)
    with pytest.raises(ShardingError, match="unknown kind 'mlpp'"):
        megatron.specs("mlpp")


def test_plan_flops_from_the_shapes():
    t, s, h, n = 4096, 1024, 512, 4
    p = megatron.plan(t, h, 4 * h, 8, n, "bf16")
    # weight matmuls: 2 FLOPs per multiply-add, 12 H² weights split N ways; attention's QKᵀ and
    # softmax·V: 2 · 2 · T · S · H, split by heads
    forward = 2 * t * 12 * h * h / n + 4 * t * s * h / n
    assert p.flops(s) == pytest.approx(forward)
    assert p.flops(s, training=True) == pytest.approx(3 * forward)
    assert megatron.plan(t, h, 4 * h, 8, n, kind="mlp").flops(s) == pytest.approx(
        2 * t * 8 * h * h / n)  # the MLP alone has no attention scores


# --- the chapter's new checkers: the right answer, plausible wrong answers, the stub -----------


def test_tp_bytes_checker(capsys):
    v = 8 * 2048 * 12288 * 2  # one all-reduce: B · S · H bf16 values
    tpviz.exercises.check_tp_bytes(4 * 2 * 7 / 8 * v)  # 4 ring all-reduces over 8 devices
    assert "✓" in capsys.readouterr().out
    check = tpviz.exercises.check_tp_bytes
    _fails(check, 4 * v, words="size of the arrays")
    _fails(check, 2 * 2 * 7 / 8 * v, words="forward pass only")  # or 4 all-gathers
    _fails(check, 4 * 2 * v, words="large-N limit")
    _fails(check, 4 * 2 * 3 / 4 * v, words="not right")  # the ring of 4 devices
    check(...)
    assert "not attempted" in capsys.readouterr().out


def _tp_ratio(n, h=5120, t=8 * 2048, s=2048):
    # 4 ring all-reduces on H100 NVLink, each with NCCL's base latency 6.6 µs and 2(n - 1)
    # steps of 0.6 µs; on one device there is nothing to all-reduce
    comm = 0.0 if n == 1 else 4 * (2 * (n - 1) / n * t * h * 2 / 4.5e11 + 6.6e-6 + 2 * (n - 1) * 0.6e-6)
    compute = 3 * (2 * t * 12 * h * h / n + 4 * t * s * h / n) / 9.89e14
    return 100 * comm / compute  # percent


def test_tp_degree_checker(capsys):
    weights = 40 * 12 * 5120**2 * 2  # GPT-3 13B blocks in bf16
    for n in (2, 4):  # a design with two admissible answers: 12.6 and 6.3 GB, 9 % and 27 %
        tpviz.exercises.check_tp_degree(n, weights / n, _tp_ratio(n))
        assert "✓" in capsys.readouterr().out
    check = tpviz.exercises.check_tp_degree
    _fails(check, 1, weights, _tp_ratio(1), words="over 16 GB")
    _fails(check, 8, weights / 8, _tp_ratio(8), words="over 50 %")
    _fails(check, 4, weights, _tp_ratio(4), words="weight bytes")
    _fails(check, 4, weights / 4, 2 * _tp_ratio(4), words="communication / compute")
    _fails(check, 16, weights / 16, _tp_ratio(16), words="1, 2, 4 or 8")
