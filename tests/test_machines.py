"""Chapter 2's topic: figures, explorers and checkers. Expected values are worked by hand from
the published constants (austin2025scaling, NVIDIA datasheets), not read from core.hardware."""

from checking import fails, passes, stub
from matplotlib.figure import Figure

import tpviz
from tpviz import exercises as ex
from tpviz.machines import draw, explore


def test_figures_and_explorers():
    assert isinstance(draw.torus((8, 16), (False, True)), Figure)
    html, fig = explore.render_network("TPU v5e 8×16", explore.GROUPS[0], "all-gather", 64.0)
    # a line of 8: 7/8 · 64 MB / 4.5e10 + 7 µs = 1,251.4 µs
    assert "1,251.4 µs" in html and isinstance(fig, Figure)
    html, _ = explore.render_roofline("TPU v5e", False, 128)
    assert "memory" in html and "ridge 243" in html
    assert "compute" in explore.render_roofline("TPU v5e", False, 512)[0]
    rows = explore.network_rows("H100 ×256 (32 nodes)", explore.GROUPS[2], "all-reduce", 1000.0)
    assert rows[1]["note"].endswith("node NICs (400 GB/s)-bound")


def test_explorer_widgets_run():
    assert tpviz.explore_network() is not None and tpviz.explore_roofline() is not None


def test_check_matmul_ridge(capsys):
    # ridge C/W = 9.89e14 / 3.35e12 = 295.2; intensity B·D/(2B + D) ≥ ridge from B = 319
    passes(ex.check_matmul_ridge, 319, capsys=capsys)
    fails(ex.check_matmul_ridge, 295, words="ridge itself")
    fails(ex.check_matmul_ridge, 240, words="memory-bound")
    fails(ex.check_matmul_ridge, 400, words="compute-bound, but so is a smaller B")
    stub(ex.check_matmul_ridge, ..., capsys=capsys)


def test_check_wraparound(capsys):
    axis0 = 7 / 8 * 64e6 / 4.5e10 * 1e6 + 7  # a line of 8, 7 hops
    axis1 = 15 / 16 * 64e6 / 9e10 * 1e6 + 8  # a ring of 16, 8 hops
    passes(ex.check_wraparound, (axis0, axis1), capsys=capsys)
    fails(ex.check_wraparound, (7 / 8 * 64e6 / 9e10 * 1e6 + 4, axis1), words="no wraparound")
    fails(ex.check_wraparound, (axis1, axis0), words="axis 0's time")
    fails(ex.check_wraparound, 3.0, words="pair")


def test_check_ring_all_to_all(capsys):
    # 16 MB: each link carries V/8 each way at 4.5e10 B/s (44.4 µs), plus 8 hops of 1 µs
    passes(ex.check_ring_all_to_all, 16e6 / (8 * 4.5e10) * 1e3 + 0.008, capsys=capsys)
    fails(ex.check_ring_all_to_all, 16e6 / (8 * 4.5e10) * 1e3, words="latency")
    fails(ex.check_ring_all_to_all, 15 / 256 * 16e6 / 9e10 * 1e3, words="switch")
    fails(ex.check_ring_all_to_all, 15 / 256 * 16e6 / 9e10 * 1e3 + 0.008, words="switch")
    fails(ex.check_ring_all_to_all, 16e6 / (4 * 4.5e10) * 1e3 + 0.008, words="not right")
    # a learner's slips within 0.01 ms of the answer (0.0524 ms) are still wrong: 15 hops
    # (n - 1, one way round), 16 MiB for 16 MB, a (n - 1)/n factor on the ring's V/8
    for wrong in (16e6 / (8 * 4.5e10) * 1e3 + 0.015, 2**24 / (8 * 4.5e10) * 1e3 + 0.008,
                  15 / 16 * 16e6 / (8 * 4.5e10) * 1e3 + 0.008):
        fails(ex.check_ring_all_to_all, wrong, words="not right")


def test_check_hop_crossover(capsys):
    passes(ex.check_hop_crossover, 8e-6 * 9e10 * 16 / 15, capsys=capsys)  # 768,000 bytes
    fails(ex.check_hop_crossover, 8e-6 * 9e10, words="N - 1")
    fails(ex.check_hop_crossover, 15e-6 * 9e10 * 16 / 15, words="one way")


def test_check_sharp(capsys):
    # NCCL's base latency 6.6 µs per collective, then 0.6 µs per NVLink ring step
    plain = 2 * 7 / 8 * 1e9 / 4.5e11 + 6.6e-6 + 2 * 7 * 0.6e-6
    sharp = 1e9 / 4.5e11 + 6.6e-6 + 2 * 0.6e-6
    passes(ex.check_sharp, plain / sharp, capsys=capsys)
    fails(ex.check_sharp, 2.0, words="2 \\(N - 1\\)/N")
    fails(ex.check_sharp, 1.3, words="not right")


def test_check_pod_design(capsys):
    # B/N = 512 tokens, α = 4.59e14 / 1.8e11 = 2550: TP needs Y ≤ M_Y·F/α = 11.2·M_Y and
    # FSDP X ≤ B·M_X/α = 822·M_X. Layouts: each torus axis of 16 split x_a·y_a = 16.
    # Y = 4 on sub-rings of one axis, X = 4·16·16 over all three
    passes(ex.check_pod_design, 1024, 4, 3, 1, capsys=capsys)
    # Y = 4·4 over two shared axes, X = 4·4·16 over three
    passes(ex.check_pod_design, 256, 16, 3, 2, capsys=capsys)
    passes(ex.check_pod_design, 2048, 2, 3, 1, capsys=capsys)
    # read strictly, a shared axis gives Y's 4 neighbours one link (no wraparound): TP
    # 4·2²¹·8192/(1024·9e10) = 0.75 ms, still under the 1.05 ms of math ...
    ex.check_pod_design(1024, 4, 3, 1)
    assert "still is (0.75 ms)" in capsys.readouterr().out
    # ... while Y = 8 neighbours on one link take 4·2²¹·8192/(512·9e10) = 1.49 ms
    ex.check_pod_design(512, 8, 3, 1)
    assert "takes 1.49 ms; 6 of the 9 layouts" in capsys.readouterr().out
    # the old key: X = 1,024 cannot fit on 2 torus axes (16·16 = 256 chips)
    fails(ex.check_pod_design, 1024, 4, 2, 1, words="cannot be laid out")
    fails(ex.check_pod_design, 512, 8, 1, 2, words="at most 16 chips")
    # whole axes: Y = 16 on one axis is communication-bound (16 > 11.2)
    fails(ex.check_pod_design, 256, 16, 2, 1, words="tensor parallelism")
    fails(ex.check_pod_design, 16, 256, 1, 2, words="tensor parallelism")
    # Y = 64 over three axes: 64 > 33.7
    fails(ex.check_pod_design, 64, 64, 3, 3, words="tensor parallelism")
    # no tensor parallelism: X = 4,096 > 822·3
    fails(ex.check_pod_design, 4096, 1, 3, 0, words="FSDP")
    fails(ex.check_pod_design, 1024, 4, 3, 3, words="cannot be laid out")
    fails(ex.check_pod_design, 1024, 2, 3, 1, words="4,096")
    # a learner's slips: Y's shared axis not counted (M_Y = 0), two axes for X + Y, whole
    # axes the other way round, X over two axes only
    fails(ex.check_pod_design, 1024, 4, 3, 0, words="cannot be laid out")
    fails(ex.check_pod_design, 1024, 4, 1, 1, words="cannot be laid out")
    fails(ex.check_pod_design, 4, 1024, 1, 3, words="tensor parallelism")
    fails(ex.check_pod_design, 512, 8, 2, 1, words="at most 256 chips")
