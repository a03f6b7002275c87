"""The hardware model: each topology rule against a number worked by hand, the presets against
their published figures, and the thresholds against the Scaling Book's."""

import pytest

from tpviz.core import hardware as hw
from tpviz.errors import ArgumentError, ArgumentTypeError

V = 1.6e8  # bytes of the whole array


def test_wraparound_follows_each_generation_rule():
    # v5e/v6e: only axes of 16; v5p: every axis iff whole 4x4x4 cubes (austin2025scaling)
    assert hw.tpu("TPU v5e", (16, 16)).wrap == (True, True)
    assert hw.tpu("TPU v5e", (8, 16)).wrap == (False, True)
    assert hw.tpu("TPU v5e", (4, 4)).wrap == (False, False)
    assert hw.tpu("TPU v5p", (4, 4, 8)).wrap == (True, True, True)
    assert hw.tpu("TPU v5p", (2, 2, 4)).wrap == (False, False, False)
    # a v4p/v5p slice named by fewer axes is padded with 1s: 4x4 is 4x4x1, not whole cubes
    assert hw.tpu("TPU v4p", (4, 4)).wrap == (False, False)
    assert hw.tpu("TPU v5p", (16,)).wrap == (False,)


def test_all_gather_with_and_without_wraparound():
    # 16 chips in a ring: 15/16 V over two links of 4.5e10, 8 hops of 1 µs
    ring = hw.tpu("TPU v5e", (16, 16)).price("all-gather", V, (0,))
    assert ring.bandwidth_s == pytest.approx(15 / 16 * V / 9e10)
    assert ring.latency_s == pytest.approx(8e-6)
    # 4 chips in a line: 3/4 V over one link, 3 hops: the Scaling Book's 560 µs for 34 MB
    line = hw.tpu("TPU v5e", (4, 4)).price("all-gather", 34e6, (0,))
    assert line.bandwidth_s == pytest.approx(3 / 4 * 34e6 / 4.5e10)
    assert line.latency_s == pytest.approx(3e-6)
    assert hw.tpu("TPU v5e", (4, 4)).collective_time("all-gather", 34e6, (0,)) == pytest.approx(
        3 / 4 * 34e6 / 4.5e10 + 3e-6)


def test_two_axes_add_their_links():
    p = hw.tpu("TPU v5e", (16, 16)).price("all-reduce", V, (0, 1))
    assert p.bandwidth_s == pytest.approx(2 * 255 / 256 * V / (2 * 9e10))
    assert p.latency_s == pytest.approx(2 * 16e-6)


def test_all_to_all_on_a_ring_is_a_quarter_of_an_all_gather():
    s = hw.tpu("TPU v5e", (16, 16))
    a2a = s.price("all-to-all", V, (0,))
    # b = V/16 per chip, b/16 to each peer; each link each way carries b·(16²/8)/16 = V/8
    assert a2a.bandwidth_s == pytest.approx(V / 8 / 4.5e10) == pytest.approx(V / (4 * 9e10))
    # without wraparound the middle link carries (n/2)² · b/n = V/4 each way: twice as long
    line = hw.tpu("TPU v5e", (8, 16)).price("all-to-all", V / 2, (0,))
    assert line.bandwidth_s == pytest.approx(V / 2 / 4 / 4.5e10)


def test_hierarchical_on_two_and_thirty_two_nodes():
    c = hw.gpu_cluster("H100", 256)
    two = c.price("all-gather", 1.6e9, 16)
    # NVLink: 7/8 · V / 450e9 = 3.11 ms; NICs: 1/2 · V / 400e9 = 2 ms -> NVLink bounds
    assert two.bandwidth_s == pytest.approx(7 / 8 * 1.6e9 / 4.5e11)
    assert two.bound == "NVLink"
    # NCCL's ring/LL model: baseLat 6.6 µs, then 0.6 µs per NVLink step, 2.7 µs per network step
    assert two.latency_s == pytest.approx(6.6e-6 + 7 * 0.6e-6 + 1 * 2.7e-6)
    many = c.price("all-reduce", 1.6e9, 256)
    # NICs: 2 · 31/32 · V / 400e9 = 7.75 ms beats NVLink's 6.22 ms
    assert many.bandwidth_s == pytest.approx(2 * 31 / 32 * 1.6e9 / 4e11)
    assert many.bound.startswith("node NICs")
    # a group with one GPU per node uses one 50 GB/s NIC (the rails serve the other groups)
    strided = c.price("all-gather", 1.6e9, 32, per_node=1)
    assert strided.bandwidth_s == pytest.approx(31 / 32 * 1.6e9 / 5e10)


def test_scalable_units_bound_the_ring_between_nodes():
    # the Scaling Book's precise form: V · max over levels of (D - 1)/(D · W); the leaf level
    # is one SU of 32 nodes at 400 GB/s (413 GB/s), the spine 4 SUs at 12.8 TB/s each
    c = hw.gpu_cluster("H100", 1024)  # 128 nodes
    p = c.price("all-gather", 1.6e9)
    assert p.bandwidth_s == pytest.approx(31 / 32 * 1.6e9 / 4e11)  # not 127/128
    assert p.latency_s == pytest.approx(6.6e-6 + 7 * 0.6e-6 + (31 + 3) * 2.7e-6)
    # within one SU nothing changes: 32 nodes, 31/32 as before
    assert c.price("all-gather", 1.6e9, 256).bandwidth_s == pytest.approx(p.bandwidth_s)


def test_nccl_flat_ring_counts_steps_as_tuning_cc():
    # NCCL's ring latency (src/graph/tuning.cc): baseLat + (nsteps - nInterSteps) · intraLat
    # + nInterSteps · interLat, nsteps = n - 1 (2(n - 1) for an all-reduce), nInterSteps =
    # nNodes - 1 (twice), intraLat = max(0.6, netOverhead 1.0) µs once it spans nodes, 2.7 µs
    c = hw.gpu_cluster("H100", 32)  # 4 nodes of 8
    ag = c.price("all-gather", 1.6e9, algorithm="ring")
    assert ag.latency_s == pytest.approx(6.6e-6 + 28 * 1.0e-6 + 3 * 2.7e-6)  # 42.7 µs
    ar = c.price("all-reduce", 1.6e9, algorithm="ring")
    assert ar.latency_s == pytest.approx(6.6e-6 + 2 * (28 * 1.0e-6 + 3 * 2.7e-6))  # 78.8 µs
    # every byte of 31/32 V crosses the slower of NVLink (450) and the 8 NICs (400 GB/s)
    assert ag.bandwidth_s == pytest.approx(31 / 32 * 1.6e9 / 4e11)


def test_sharp_all_reduce_costs_v_over_w():
    plain = hw.gpu_cluster("H100", 8).price("all-reduce", 1.6e9)
    sharp = hw.gpu_cluster("H100 + SHARP", 8).price("all-reduce", 1.6e9)
    assert plain.bandwidth_s == pytest.approx(2 * 7 / 8 * 1.6e9 / 4.5e11)
    assert sharp.bandwidth_s == pytest.approx(1.6e9 / 4.5e11)  # B / W (austin2025scaling)
    # 2·(7/8) = 1.75× in theory on 8 GPUs ("the predicted 75%"), not 2×
    assert plain.bandwidth_s / sharp.bandwidth_s == pytest.approx(1.75)


def test_small_arrays_are_latency_bound():
    # the Scaling Book (Sharded Matrices, Q3): 256 bytes over a 4-axis of a v4p 4x4x4: two hops
    p = hw.tpu("TPU v4p", (4, 4, 4)).price("all-gather", 256, (0,))
    assert p.latency_s == pytest.approx(2e-6)
    assert p.bound == "latency"
    assert p.seconds == pytest.approx(2e-6 + 3 / 4 * 256 / 9e10)
    # the max() model takes the larger term, the α–β model adds them
    assert p.overlapped_s == pytest.approx(2e-6)
    # its Pop Quiz 2: 32 kB per chip over the 4-axis of a v5e {X: 8, Y: 4}: 3 hops (max():
    # 3 µs; measured about 8 µs); the sum adds 3/4 · 131,072 B over one link
    q = hw.tpu("TPU v5e", (8, 4)).price("all-gather", 256 * 256 * 2, (1,))
    assert q.overlapped_s == pytest.approx(3e-6)
    assert q.seconds == pytest.approx(3e-6 + 3 / 4 * 131072 / 4.5e10)  # 5.2 µs


def test_v4p_has_its_published_numbers_and_wraparound():
    chip = hw.CHIPS["TPU v4p"]  # 275 TFLOP/s bf16 and int8, 32 GB HBM at 1.2e12 B/s
    assert (chip.peak(), chip.peak("int8"), chip.hbm_bytes, chip.hbm_bandwidth) == (
        2.75e14, 2.75e14, 32e9, 1.2e12)
    s = hw.tpu("TPU v4p", (4, 4, 4))  # the contract; whole cubes wrap
    assert s.wrap == (True, True, True) and hw.tpu("TPU v4p", (2, 2, 4)).wrap == (False,) * 3
    assert hw.TPUS["TPU v4p"].link == 4.5e10 and hw.TPUS["TPU v4p"].pod == (16, 16, 16)
    # Sharded Matrices, Q2: AllGather_XY([B_X, D_Y]), B = 1024, D = 4096, bf16: 2BD over two
    # wrapped axes, (15/16)·V/(2 · 9e10) ≈ the book's 46 µs, plus 2 + 2 hops
    v = 2 * 1024 * 4096
    p = s.price("all-gather", v, (0, 1))
    assert p.bandwidth_s == pytest.approx(15 / 16 * v / 1.8e11)
    assert p.latency_s == pytest.approx(4e-6)
    with pytest.raises(ArgumentError, match="mesh_shape"):
        hw.tpu("TPU v4p", (16, 16, 32))


def test_permute_follows_distance_and_ports():
    v = 2 * 8 * 128 * 8192  # the Scaling Book's Q5: bf16[8, 128, 8192], 16,777,216 bytes
    q5 = hw.tpu("TPU v5e", (4, 4)).send(v, (0, 0), (3, 3))
    # no wraparound on a 4x4: half right, half down (two ports), 3 + 3 hops
    assert q5.bandwidth_s == pytest.approx(v / (2 * 4.5e10))  # 186.4 µs
    assert q5.latency_s == pytest.approx(6e-6)
    assert q5.seconds == pytest.approx(v / 9e10 + 6e-6)
    assert hw.tpu("TPU v5e", (4, 4)).send(v, 0, 15) == q5  # indices, row-major
    # a neighbour: one port, one hop
    one = hw.tpu("TPU v5e", (4, 4)).send(v, (0, 0), (0, 1))
    assert (one.bandwidth_s, one.latency_s) == pytest.approx((v / 4.5e10, 1e-6))
    # half-way round a ring of 16: both ways at once, 8 hops
    half = hw.tpu("TPU v5e", (16, 16)).send(v, (0, 0), (8, 0))
    assert (half.bandwidth_s, half.latency_s) == pytest.approx((v / 9e10, 8e-6))
    # with wraparound the short way: (0, 0) -> (15, 15) is 1 + 1 hops on a 16x16
    assert hw.tpu("TPU v5e", (16, 16)).send(v, (0, 0), (15, 15)).latency_s == pytest.approx(
        2e-6)
    # a ring of ppermute (chip i to i + 1, the last to the first) over one axis: on a ring each
    # link carries V one way, one hop; on a line the last message walks back over n - 1 hops
    ring = hw.tpu("TPU v5e", (16, 16)).price("collective-permute", v, (0,))
    line = hw.tpu("TPU v5e", (4, 4)).price("collective-permute", v, (0,))
    assert (ring.bandwidth_s, ring.latency_s) == pytest.approx((v / 4.5e10, 1e-6))
    assert (line.bandwidth_s, line.latency_s) == pytest.approx((v / 4.5e10, 3e-6))
    # two messages over the same link add up
    both = hw.tpu("TPU v5e", (4, 4)).permute(v, [((0, 0), (0, 2)), ((0, 1), (0, 3))])
    assert both.bandwidth_s == pytest.approx(2 * v / 4.5e10)
    with pytest.raises(ArgumentError, match="source"):
        hw.tpu("TPU v5e", (4, 4)).send(v, (0, 4), (0, 0))
    with pytest.raises(ArgumentTypeError, match="pairs"):
        hw.tpu("TPU v5e", (4, 4)).permute(v, 5)


def test_groups_are_laid_out_along_torus_axes():
    v5e, v5p = hw.TPUS["TPU v5e"], hw.TPUS["TPU v5p"]
    assert (v5e.group(4).mesh_shape, v5e.group(4).wrap) == ((4,), (False,))
    assert (v5e.group(16).wrap, v5e.group(32).mesh_shape) == ((True,), (16, 2))
    assert (v5p.group(8).wrap, v5p.group(2).wrap) == ((True,), (False,))
    assert v5p.group(4096).mesh_shape == (16, 16, 16)
    # on v5p each group axis that is a multiple of 4 is a whole slice axis (a ring), the rest
    # a segment: 32 chips are a ring of 16 and a line of 2, not two lines (16 and 64 wrap)
    assert (v5p.group(32).mesh_shape, v5p.group(32).wrap) == ((16, 2), (True, False))
    assert v5p.group(512).wrap == (True, True, False)
    assert v5p.group(64).wrap == (True, True)
    # all-gather of V over the 32: links 2W + W, hops 8 + 1 (by hand)
    p = v5p.group(32).price("all-gather", V)
    assert p.bandwidth_s == pytest.approx(31 / 32 * V / (3 * 9e10), rel=1e-12)
    assert p.latency_s == pytest.approx(9e-6, rel=1e-12)
    with pytest.raises(ArgumentError, match="devices"):
        v5e.group(17)


@pytest.mark.parametrize("name", ["LLaMA-3 70B", "GPT-3 175B"])
def test_flops_conventions(name):
    m = hw.MODELS[name]
    attention = 12 * m.seq * m.heads * m.d * m.layers  # QKᵀ and AV, every score, training
    matmul = 6 * (m.layers * m.layer_matmul_params + m.vocab * m.hidden)
    assert m.flops_per_token(convention="6N") == 6 * m.active_params
    assert m.flops_per_token(convention="causal") == matmul + attention / 2
    assert m.flops_per_token() == m.flops_per_token(convention="full") == matmul + attention
    with pytest.raises(ArgumentError, match="convention"):
        m.flops_per_token(convention="kaplan")


def test_llama3_70b_6n_is_six_times_its_parameters():
    assert hw.MODELS["LLaMA-3 70B"].flops_per_token(convention="6N") == 6 * 70_553_706_496


def test_roofline_of_a_v5e_matmul():
    chip = hw.CHIPS["TPU v5e"]
    assert chip.ridge() == pytest.approx(1.97e14 / 8.1e11)  # ≈ 243 FLOPs per byte
    d = f = 8192
    for b, bound in ((128, "memory"), (512, "compute")):
        flops, nbytes = 2 * b * d * f, 2 * (b * d + d * f + b * f)
        r = hw.roofline("TPU v5e", flops, nbytes)
        assert r.bound == bound
        assert r.seconds == pytest.approx(max(flops / 1.97e14, nbytes / 8.1e11))


def test_thresholds_match_the_scaling_book():
    c, w = 4.59e14, 1.8e11  # v5p: α = 2550
    assert hw.data_parallel_batch(c, w) == pytest.approx(2550, rel=1e-3)
    assert hw.tensor_parallel_limit(c, w, 32768) == pytest.approx(32768 / 2550, rel=1e-3)
    # mixed FSDP + TP on a 3D mesh (M_X M_Y = 2), F = 32768: B/N > 2550²/(2F) ≈ 99
    assert hw.mixed_batch(c, w, 32768, 2, 1) == pytest.approx(2550**2 / (2 * 32768), rel=1e-3)
    # the Scaling Book's example: N = 64, B = 48000, F = 32768 give X_opt ≈ 13.9 (M_X/M_Y = 2)
    assert hw.best_fsdp(48000, 32768, 64, 2, 1) == pytest.approx(13.9, rel=0.02)


@pytest.mark.parametrize(("name", "published"), [
    ("LLaMA-3 8B", 8.03e9), ("LLaMA-3 70B", 70.6e9), ("LLaMA-3 405B", 405e9),
    ("LLaMA-2 70B", 69e9), ("Mixtral 8x7B", 46.7e9), ("GPT-3 175B", 175e9)])
def test_parameter_counts_match_the_published_ones(name, published):
    assert hw.MODELS[name].params == pytest.approx(published, rel=5e-3)


def test_mixtral_active_parameters_and_flops():
    m = hw.MODELS["Mixtral 8x7B"]
    assert m.active_params == pytest.approx(12.9e9, rel=5e-3)  # jiang2024mixtral: 12.9B active
    # training: 6 FLOPs per active matmul weight (embedding lookups excluded) + attention
    matmul = m.layers * m.layer_matmul_params + m.vocab * m.hidden
    assert m.flops_per_token() == 6 * matmul + 12 * m.seq * m.heads * m.d * m.layers


def test_contract_names_and_bad_input():
    assert {"TPU v5e", "TPU v5p", "H100"} <= set(hw.SYSTEMS)
    assert hw.roofline("H100", 1e12, 1e6).bound == "compute"
    with pytest.raises(ArgumentError, match="mesh_shape"):
        hw.tpu("TPU v5e", (32, 32))
    with pytest.raises(ArgumentError, match="axis longer"):
        hw.tpu("TPU v5e", (32, 8))  # 256 chips, but a v5e pod's axes are 16
    with pytest.raises(ArgumentError, match="axis longer"):
        hw.tpu("TPU v5p", (32, 16, 16))  # the v5p pod is 16x20x28
    assert hw.tpu("TPU v5p", (28, 20, 16)).mesh_shape == (28, 20, 16)
    with pytest.raises(ArgumentError, match="kind"):
        hw.tpu("TPU v5e", (16,)).price("all-sum", 1.0)
    with pytest.raises(ArgumentError, match="per_node"):
        hw.gpu_cluster("H100", 16).price("all-gather", 1.0, 16, per_node=3)


def test_mesh2d_and_zero_give_the_same_fsdp_bytes():
    from tpviz import mesh2d, zero

    b, d, f, n = 64, 16, 32, 8
    weights = 2 * d * f * 2  # W_in and W_out, bf16
    p = mesh2d.plan(b, d, f, (n, 1), "bf16")
    data_axis = sum(c.sent_bytes for c in p.collectives(True) if c.axes == ("data",))
    assert p.fsdp == "reshard_after_forward=False"
    kept = zero.fsdp_collectives(weights, n, reshard_after_forward=False)
    assert data_axis == kept.sent_bytes() == 2 * 7 / 8 * weights  # 8·D·F bytes (N → ∞)
    # ZeRO stage 3 gathers again for the backward pass: 12·D·F, one gather more, by name
    assert zero.collectives(d * f * 2, n, 3).sent_bytes() == pytest.approx(
        zero.fsdp_collectives(weights, n).sent_bytes()) == pytest.approx(3 * 7 / 8 * weights)


def test_more_scaling_book_answers():
    # How to Think About TPUs, Q1: 200B bf16 parameters over 32 v4p: 12.5e9 bytes per chip at
    # 1.2e12 B/s (the book rounds with 1.23e12 to "around 10ms")
    assert hw.roofline("TPU v4p", 0, 400e9 / 32).memory_s == pytest.approx(12.5e9 / 1.2e12)
    # How to Think About GPUs: an all-to-all inside a node costs B(N - 1)/(W N²)
    a2a = hw.gpu_cluster("H100", 8).price("all-to-all", 1e9)
    assert a2a.bandwidth_s == pytest.approx(1e9 * 7 / (4.5e11 * 64))
