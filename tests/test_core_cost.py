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
    # cited latencies: ~1 µs per ICI hop (the Scaling Book), 0.6 µs per NVLink ring step
    # and 2.7 µs per network step (NCCL's ring/LL tuning model)
    assert s["TPU v5e (ICI)"].latency == 1e-6
    assert s["H100 cluster (NVLink + InfiniBand)"].latency == 0.6e-6
    assert s["H100 cluster (NVLink + InfiniBand)"].network_latency == 2.7e-6


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
