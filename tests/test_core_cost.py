"""The cost model's presets follow the one definition of W, and the α–β time adds up."""

import pytest

from tpviz.core import cost
from tpviz.core.collectives import Collective


def test_presets_follow_the_definition_of_w():
    # W: bytes/s one device sends, one direction, into a collective over one mesh axis
    s = cost.SYSTEMS
    # TPU: two ICI links per torus axis, one each way round the ring; the Scaling Book's
    # per-link one-way figures are 4.5e10 (v5e) and 9e10 (v5p)
    assert s["TPU v5e (ICI)"].bandwidth == 2 * 4.5e10
    assert s["TPU v5p (ICI)"].bandwidth == 2 * 9e10
    # H100: the datasheet's 900 GB/s NVLink counts both directions
    assert s["H100 (NVLink)"].bandwidth == 900e9 / 2
    # PCIe 4.0 x16: 16 GT/s per lane, 128b/130b encoding, 8 bits per byte, one direction
    assert s["H100 (PCIe 4.0 x16)"].bandwidth == pytest.approx(16e9 * 16 * 128 / 130 / 8,
                                                               rel=1e-3)
    # one 400 Gb/s InfiniBand link per GPU, one direction
    assert s["H100 cluster (NVLink + InfiniBand)"].between_nodes == 400e9 / 8
    # cited latencies: ~1 µs per ICI hop (the Scaling Book), 0.6 µs per NVLink ring step,
    # 2.7 µs per network step and 6.6 µs per collective (NCCL's ring/LL tuning model)
    assert s["TPU v5e (ICI)"].latency == 1e-6
    assert s["H100 cluster (NVLink + InfiniBand)"].latency == 0.6e-6
    assert s["H100 cluster (NVLink + InfiniBand)"].network_latency == 2.7e-6
    assert s["H100 cluster (NVLink + InfiniBand)"].base_latency == 6.6e-6
    assert s["TPU v4p (ICI)"].bandwidth == 2 * 4.5e10


def test_estimate_adds_latency_per_step():
    system = cost.System("test", flops=1e12, bandwidth=1e9, source="", latency=1e-6)
    ar = Collective("all-reduce", 8_000, 8)  # ring: 14 steps, 2 · 7/8 · 8000 bytes sent
    e = cost.estimate(2e9, [ar], system)
    assert e.compute_s == pytest.approx(2e-3)
    assert e.comm_s == pytest.approx(14e-6 + 14_000 / 1e9)


def test_presets_price_through_the_hardware_model():
    # a v5e group of 16 on one torus axis with wraparound: 8 hops, (15/16) V over 2 links
    tpu = cost.SYSTEMS["TPU v5e (ICI)"]
    ag = Collective("all-gather", 16_000_000, 16)
    assert ag.time(tpu) == pytest.approx(8e-6 + 15 / 16 * 16e6 / 9e10)
    # 16 H100s in two full nodes: NVLink (7/8 V at 450 GB/s) bounds, not the NICs (V/2 at 400)
    gpu = cost.SYSTEMS["H100 cluster (NVLink + InfiniBand)"]
    p = gpu.price(ag)
    assert p.bandwidth_s == pytest.approx(7 / 8 * 16e6 / 4.5e11) and p.bound == "NVLink"


def test_a_tpu_group_is_priced_on_its_own_torus_axes():
    # a 4-chip v5e group is a line (wraparound only on axes of 16): (3/4) V over ONE link of
    # 4.5e10, 3 hops; a ring would halve the bandwidth term (the old 535 µs for 64.2 MB)
    tpu = cost.SYSTEMS["TPU v5e (ICI)"]
    p = tpu.price(Collective("all-gather", 64_200_000, 4))
    assert p.bandwidth_s == pytest.approx(3 / 4 * 64.2e6 / 4.5e10)  # 1,070 µs
    assert p.latency_s == pytest.approx(3e-6)
    # v5p groups of whole cubes wrap: a group of 8 is a ring
    v5p = cost.SYSTEMS["TPU v5p (ICI)"]
    assert v5p.price(Collective("all-gather", 8_000_000, 8)).bandwidth_s == pytest.approx(
        7 / 8 * 8e6 / 1.8e11)
    # 32 v5e chips span a 16 (ring) and a 2 (line): their links add, 2W + W
    big = tpu.price(Collective("all-gather", 32_000_000, 32))
    assert big.bandwidth_s == pytest.approx(31 / 32 * 32e6 / (3 * 4.5e10))


def test_a_compiled_permute_is_routed_by_its_pairs():
    # v5e groups of 4 are lines (no wraparound), 4.5e10 B/s per link and direction, 1 µs a hop
    tpu, v = cost.SYSTEMS["TPU v5e (ICI)"], 1_000_000
    plan = tpu.price(Collective("collective-permute", v, 4))  # no pairs: a cyclic shift by one
    assert (plan.bandwidth_s, plan.latency_s) == pytest.approx((v / 4.5e10, 3e-6))  # 3 -> 0
    # a pipeline's sends 0 -> 1 -> 2 -> 3: one hop each, no message walks back
    sends = tpu.price(Collective("collective-permute", v, 3, groups=((0, 1), (1, 2), (2, 3))))
    assert (sends.bandwidth_s, sends.latency_s) == pytest.approx((v / 4.5e10, 1e-6))
    # a shift by two on the line: the link 1 -> 2 carries both messages, each walks 2 hops
    two = tpu.price(Collective("collective-permute", v, 2, groups=((0, 2), (1, 3))))
    assert (two.bandwidth_s, two.latency_s) == pytest.approx((2 * v / 4.5e10, 2e-6))
    # on a 2x4 slice (on_slice), ids are row-major chips: 3 = (0, 3) -> 4 = (1, 0) differs on
    # both axes, 1 + 3 hops, half the bytes by each of two ports
    placed = tpu.on_slice((2, 4), X=0, Y=1)
    corner = placed.price(Collective("collective-permute", v, 1, groups=((3, 4),)))
    assert (corner.bandwidth_s, corner.latency_s) == pytest.approx((v / 2 / 4.5e10, 4e-6))
    # the same pairs on a GPU switch are priced as before (the pairs play no part there)
    gpu = cost.SYSTEMS["H100 (NVLink)"]
    assert gpu.price(Collective("collective-permute", v, 2, groups=((0, 2), (1, 3)))) == (
        gpu.price(Collective("collective-permute", v, 2)))


def test_chapter_3_question_c_on_the_slice_model():
    from tpviz import matmul

    # In[B_X, D_Y] · W1[D_Y, F] on a v5e {X: 2, Y: 4}: the partial Out[B_X, F] (256 MiB)
    # all-reduced over Y, a line of 4: 2 · (3/4) · V / 4.5e10 + 6 hops = 8.95 ms
    tpu = cost.SYSTEMS["TPU v5e (ICI)"]
    p = matmul.plan((8192, 8192), (8192, 32768), "In[B_X, D_Y]", "W1[D_Y, F]",
                    {"X": 2, "Y": 4}, dtype="bf16")
    v = 4096 * 32768 * 2
    want = 2 * 3 / 4 * v / 4.5e10 + 6e-6
    assert cost.estimate(p.flops, p.collectives, tpu).comm_s == pytest.approx(want)
    # the same through the slice itself, and through hardware.tpu: one model
    on = tpu.on_slice((2, 4), X=0, Y=1)
    assert cost.estimate(p.flops, p.collectives, on).comm_s == pytest.approx(want)
    from tpviz.core import hardware as hw

    assert hw.tpu("TPU v5e", (2, 4)).collective_time("all-reduce", v, (1,)) == pytest.approx(want)


def test_on_slice_places_mesh_axes_on_torus_axes():
    from tpviz.errors import ArgumentError

    pod = cost.SYSTEMS["TPU v5e (ICI)"].on_slice((16, 16), data=(0, 1))
    # a mesh axis over both torus axes of a 16x16 gets both rings: 4 links
    c = Collective("all-gather", 256_000_000, 256, axes=("data",))
    assert pod.price(c).bandwidth_s == pytest.approx(255 / 256 * 256e6 / (4 * 4.5e10))
    with pytest.raises(ArgumentError, match="span"):
        pod.price(Collective("all-gather", 1000, 16, axes=("data",)))
    with pytest.raises(ArgumentError, match="not a TPU"):
        cost.SYSTEMS["H100 (NVLink)"].on_slice((2, 4), X=0)
    with pytest.raises(ArgumentError, match="at most once"):
        cost.SYSTEMS["TPU v5e (ICI)"].on_slice((2, 4), X=0, Y=0)
    with pytest.raises(ArgumentError, match="torus axis"):
        cost.SYSTEMS["TPU v5e (ICI)"].on_slice((2, 4), X="a")


def test_gpu_presets_carry_nccls_base_latency():
    gpu = cost.SYSTEMS["H100 (NVLink)"]
    p = gpu.price(Collective("all-gather", 8_000, 8))
    assert p.latency_s == pytest.approx(6.6e-6 + 7 * 0.6e-6)  # baseLat + 7 ring steps (LL)
