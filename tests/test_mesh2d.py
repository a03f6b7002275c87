"""The 2D MLP: the step table's shapes and bytes from the formulas, real runs on every mesh shape
of 8 devices checked against one device, the plan and the compiled collectives, and clear errors
for meshes that don't fit."""

import dataclasses

import jax
import numpy as np
import pytest
from checking import fails as _fails
from checking import passes as _passes
from checking import stub as _stub

import tpviz
from tpviz import mesh2d
from tpviz.core import cost
from tpviz.errors import CheckFailed, ShardingError
from tpviz.mesh2d import draw, run
from tpviz.mesh2d.choose import axis_bandwidth

B, D, F = 16, 8, 32  # the notation page's sizes: batch, model width, FFN width


def test_step_table_shapes_and_bytes_from_the_formulas():
    p = mesh2d.plan(B, D, F, (4, 2), "float32")
    nx, ny = 4, 2
    local = [s.result.local for s in p.steps]
    assert local == [(B // nx, D // ny), (B // nx, D), (D, F // ny), (B // nx, F // ny),
                     (B // nx, F // ny), (F // ny, D), (B // nx, D), (B // nx, D // ny)]
    assert [(s.op, s.axis) for s in p.steps if s.communicates] == [
        ("all-gather", "model"), ("all-gather", "data"), ("all-gather", "data"),
        ("reduce-scatter", "model")]
    # the output is sharded exactly like the input
    assert p.steps[-1].result.spec == p.steps[0].operands[0].spec
    # ring bytes: all-gathers send (n-1)/n of their result, a reduce-scatter (n-1) x its result
    assert p.sent(training=False) == (1 / 2 * B // nx * D + 2 * 3 / 4 * D * F // ny
                                      + 1 * B // nx * D // ny) * 4
    assert p.sent(training=True) == 2 * p.sent(training=False)  # backward mirrors forward
    assert p.flops(training=False) == 2 * 2 * B * D * F // (nx * ny)


def test_extreme_meshes_are_fsdp_and_megatron():
    n, size = 8, 2
    dp, mega = mesh2d.data_parallel(B, D, F, n, "bf16"), mesh2d.megatron_1d(B, D, F, n, "bf16")
    fsdp = mesh2d.plan(B, D, F, (8, 1), "bf16")
    tp = mesh2d.plan(B, D, F, (1, 8), "bf16")
    # (8, 1) gathers weights and reduce-scatters gradients: as many bytes as DP's all-reduce
    assert fsdp.sent() == pytest.approx(dp.step_sent) == 2 * 7 / 8 * 2 * D * F * size
    # (1, 8): all-gather + reduce-scatter of the activations = Megatron's all-reduce
    assert tp.sent() == pytest.approx(mega.step_sent) == 2 * 2 * 7 / 8 * B * D * size
    assert fsdp.memory.weights == tp.memory.weights == dp.memory.weights // n


def test_best_mesh_follows_the_square_root_rule():
    def sent(batch, d, f, nx, ny):  # per training step: activations over model, weights over data
        return 2 * 2 * ((ny - 1) / ny * batch * d / nx + (nx - 1) / nx * d * f / ny)

    for batch, f, n in [(16384, 16384, 8), (1 << 20, 32768, 256), (64, 16384, 8),
                        (1 << 22, 4096, 8), (8192, 4096, 64)]:
        nx, ny = mesh2d.best_mesh(batch, 4096, f, n)
        shapes = [(k, n // k) for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n % k == 0]
        assert (nx, ny) == min(shapes, key=lambda s: sent(batch, 4096, f, *s))
        # ignoring (n-1)/n, the least is at N_X = sqrt(B·N/F): within a factor 2 of it
        assert 0.5 <= nx / min(n, max(1.0, np.sqrt(batch * n / f))) <= 2


def test_time_uses_the_link_each_axis_runs_on():
    tpu, gpu = cost.SYSTEMS["TPU v5p (ICI)"], cost.SYSTEMS["H100 cluster (NVLink + InfiniBand)"]
    p = mesh2d.plan(1 << 16, 8192, 32768, (8, 8), "bf16")
    # model groups are 8 neighbouring GPUs (one node); data groups span 8 nodes
    assert axis_bandwidth(gpu, p.mesh, "model") == gpu.bandwidth
    assert axis_bandwidth(gpu, p.mesh, "data") == gpu.between_nodes
    assert axis_bandwidth(gpu, {"data": 2, "model": 4}, "data") == gpu.bandwidth
    assert axis_bandwidth(tpu, p.mesh, "data") == tpu.bandwidth
    t = mesh2d.step_time(p, tpu, training=False)
    # each axis: ring all-gathers and reduce-scatters, (n-1)/n V / W plus n/2 hops of 1 µs;
    # the two axes run on different torus links and overlap, so the slower one counts
    per_axis = {}
    for c in p.collectives():
        n = c.group_size
        per_axis[c.axes[0]] = per_axis.get(c.axes[0], 0.0) + (
            (n - 1) / n * c.full_bytes / tpu.bandwidth + n // 2 * 1e-6)
    assert t.comm_s == pytest.approx(max(per_axis.values()))
    assert t.compute_s == pytest.approx(4 * (1 << 16) * 8192 * 32768 / 64 / tpu.flops)


def test_scaling_book_bound_matches_the_time_model():
    # the Scaling Book's current bound, α²/(M_X M_Y F) with α = R/W: where the best mesh turns
    # communication-bound (forward, bandwidth terms: latency set to 0) on 4096 TPU v5p chips.
    # 4096 chips cannot give each mesh axis one torus axis: the best mesh's groups span
    # several (256 = a ring of 16 × 16, M = 2; 512 = 16 × 16 rings and a line of 2, M = 2.5),
    # so the edge is α²/(M_X M_Y F) with the M of the mesh chosen; a factor 4 of the one-axis
    # edge either side (powers of two miss the balance by a few %)
    tpu = dataclasses.replace(cost.SYSTEMS["TPU v5p (ICI)"], latency=0.0)
    d, f, n = 8192, 32768, 4096
    edge = mesh2d.smallest_batch_per_device(f, tpu)
    assert edge == pytest.approx((4.59e14 / 1.8e11) ** 2 / f)  # ≈ 198 tokens per chip

    def spans(group):  # M: the group's links over one wrapped torus axis's two
        return sum(2 if wrap else 1 for k, wrap in zip(group.mesh_shape, group.wrap,
                                                       strict=True) if k > 1) / 2

    for factor, bound in [(4, "compute"), (1 / 4, "communication")]:
        batch = 1 << round(np.log2(edge * factor * n))
        shape = mesh2d.best_mesh(batch, d, f, n, tpu)
        m_x, m_y = (spans(tpu.network(k)) for k in shape)
        assert (batch / n > edge / (m_x * m_y)) == (bound == "compute"), (shape, m_x, m_y)
        p = mesh2d.plan(batch, d, f, shape, "bf16")
        assert mesh2d.step_time(p, tpu, training=False).bound == bound, (factor, batch)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(4, 2), (2, 4), (8, 1), (1, 8)])
def test_real_run_matches_one_device_plan_and_compiled_collectives(shape):
    rng = np.random.default_rng(0)
    x, dy = (rng.standard_normal((B, D), dtype=np.float32) for _ in range(2))
    w1 = rng.standard_normal((D, F), dtype=np.float32)
    w2 = rng.standard_normal((F, D), dtype=np.float32)
    c = mesh2d.check(tpviz.make_mesh(shape, ("data", "model")), x, w1, w2, dy)
    assert c.max_error < 1e-5
    nx, ny = shape
    assert c.weight_bytes == 2 * D * F * 4 // 8  # measured on the shards: 1/8 of W₁ and W₂
    assert c.activation_bytes == (B // nx * D + B // nx * F // ny) * 4  # In' and Tmp
    # the hand-written step: 3 all-gathers and 1 reduce-scatter forward, the transposes backward
    if nx > 1 and ny > 1:
        assert c.train.kinds() == {"all-gather": 4, "reduce-scatter": 4}
    assert sum(col.bytes for col in c.forward if col.group_size > 1) == sum(
        s.bytes for s in c.plan.steps if s.communicates)


@pytest.mark.slow
def test_check_catches_a_wrong_program():
    rng = np.random.default_rng(1)
    x, dy = (rng.standard_normal((B, D), dtype=np.float32) for _ in range(2))
    w1 = rng.standard_normal((D, F), dtype=np.float32)
    w2 = rng.standard_normal((F, D), dtype=np.float32)
    mesh = tpviz.make_mesh((4, 2), ("data", "model"))

    def all_reduce_then_slice(partial):  # right values, the wrong (twice as costly) collective
        full = jax.lax.psum(partial, "model")
        i = jax.lax.axis_index("model")
        return jax.lax.dynamic_slice_in_dim(full, i * (D // 2), D // 2, axis=1)

    with pytest.raises(CheckFailed, match="hand-written forward pass's collectives"):
        mesh2d.check(mesh, x, w1, w2, dy, final=all_reduce_then_slice)


@pytest.mark.parametrize(("call", "words"), [
    (lambda: mesh2d.plan(15, 8, 32, (4, 2)), "batch = 15 does not divide over the data axis"),
    (lambda: mesh2d.plan(16, 8, 33, (4, 2)), "ffn = 33 does not divide over the model axis"),
    (lambda: mesh2d.plan(16, 6, 32, (4, 2)), "hidden = 6 does not divide over the data axis"),
    (lambda: mesh2d.plan(16, 8, 32, {"X": 4, "Y": 2}), "axes 'data'"),
    (lambda: mesh2d.plan(16, 8, 32, (8,)), r"\(data, model\)"),
    (lambda: mesh2d.best_mesh(3, 5, 7, 8), "no \\(data, model\\) mesh"),
])
def test_bad_input(call, words):
    with pytest.raises(ShardingError, match=words):
        call()


def test_swapped_axis_names_are_named():
    mesh = tpviz.make_mesh((2, 4), ("model", "data"))
    x = np.zeros((B, D), np.float32)
    with pytest.raises(ShardingError, match="swapped"):
        mesh2d.check(mesh, x, np.zeros((D, F), np.float32), np.zeros((F, D), np.float32), x)
    with pytest.raises(ShardingError, match="axes 'data'"):
        mesh2d.check(tpviz.make_mesh((4, 2), ("X", "Y")), x, np.zeros((D, F), np.float32),
                  np.zeros((F, D), np.float32), x)
    with pytest.raises(ShardingError, match="axes 'data'"):
        run.forward(tpviz.make_mesh((4, 2), ("X", "Y")))
    with pytest.raises(ShardingError, match="batch = 6 does not divide over the data axis"):
        run.place(tpviz.make_mesh((4, 2), ("data", "model")), np.zeros((6, D), np.float32),
                  np.zeros((D, F), np.float32), np.zeros((F, D), np.float32))


@pytest.mark.slow
def test_drawings_show_every_step():
    p = mesh2d.plan(B, D, F, (4, 2))
    fig = draw.step(p, 1)
    assert "all-gather In along model" in fig.axes[0].get_title(loc="left")
    # every device cell shows the operand and the result: 8 devices x 2 arrays, outline + block
    assert len(fig.axes[0].patches) == 8 * 2 * 2 + 8
    anim = draw.animate(p)
    assert anim.gif[:6] == b"GIF89a" and "<img" in anim._repr_html_()
    schemes = mesh2d.compare(2048, 256, 1024, 8)
    assert [s.name for s in schemes][:2] == ["data parallel", "1D Megatron"]
    fig = draw.comparison(schemes)
    assert len(fig.axes) == 2


# --- new checkers (issue 14): right answer, plausible wrong answers, stub ---------------------




def test_check_weights_held(capsys):
    from tpviz.exercises import check_weights_held

    whole = 2 * 4096 * 16384 * 2  # W₁ and W₂ in bf16
    _passes(check_weights_held, (whole / 8 + whole / 2) / 2**20, capsys=capsys)  # 160 MiB
    _fails(check_weights_held, whole / 8 / 2**20, words="stored shards")
    _fails(check_weights_held, whole / 2**20, words="both weights whole")
    _fails(check_weights_held, 96, words="not right")
    _stub(check_weights_held, ..., capsys=capsys)


def test_check_compute_bound_batch(capsys):
    from tpviz.exercises import check_compute_bound_batch

    ratio = 1.97e14 / 9.0e10  # TPU v5e: R / W
    _passes(check_compute_bound_batch, ratio**2 / 16384, capsys=capsys)  # ≈ 293
    _fails(check_compute_bound_batch, ratio, words="R/W itself")
    _fails(check_compute_bound_batch, 4 * ratio**2 / 16384, words="adds the two axes")
    _stub(check_compute_bound_batch, ..., capsys=capsys)


def test_check_mesh_design(capsys):
    from tpviz.exercises import check_mesh_design

    # (4, 16): model groups of 16 fill two nodes: hierarchical, 8 GPUs on NVLink (7/8 V at
    # 450 GB/s) then 8 NICs per node (V/2 at 400 GB/s): NVLink bounds; 7 NVLink steps of 0.6 µs
    # and 1 network step of 2.7 µs. Data groups of 4 are 16 apart, one GPU per node: one 50 GB/s
    # NIC each, 3 network steps. The axes overlap: the slower counts.
    gib = 262144 // 4 * 8192 * 2  # In[B/N_X, D] in bf16: 1 GiB
    model_axis = 4 * (7 / 8 * gib / 4.5e11 + 7 * 0.6e-6 + 2.7e-6)  # AG In, RS Out, AG dOut, RS dIn
    data_axis = 4 * (3 / 4 * (8192 * 32768 // 16 * 2) / 5e10 + 3 * 2.7e-6)  # W₁, W₂ and grads
    ms = max(model_axis, data_axis) * 1e3  # ≈ 8.38 ms
    _passes(check_mesh_design, (4, 16), ms, capsys=capsys)  # 80 MiB of weights held
    # (8, 8): model groups of 8 inside a node (NVLink); data groups of 8, one GPU per node
    model_8 = 4 * (7 / 8 * (262144 // 8 * 8192 * 2) / 4.5e11 + 7 * 0.6e-6)
    data_8 = 4 * (7 / 8 * (8192 * 32768 // 8 * 2) / 5e10 + 7 * 2.7e-6)
    _passes(check_mesh_design, (8, 8), max(model_8, data_8) * 1e3, capsys=capsys)  # 144 MiB
    _fails(check_mesh_design, (16, 4), 4.8, words="over the budget")  # 272 MiB
    _fails(check_mesh_design, (2, 32), 16.75, words="over 10 ms")  # 48 MiB, but 16.75 ms
    _fails(check_mesh_design, (4, 16), 2 * ms, words="communication time")
    _fails(check_mesh_design, (4, 4), ms, words="not a")
    _stub(check_mesh_design, ..., ..., capsys=capsys)
