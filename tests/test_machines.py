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
    fails(ex.check_matmul_ridge, 400, words="smaller B")
    stub(ex.check_matmul_ridge, ..., capsys=capsys)


def test_check_wraparound(capsys):
    axis0 = 7 / 8 * 64e6 / 4.5e10 * 1e6 + 7  # a line of 8, 7 hops
    axis1 = 15 / 16 * 64e6 / 9e10 * 1e6 + 8  # a ring of 16, 8 hops
    passes(ex.check_wraparound, (axis0, axis1), capsys=capsys)
    fails(ex.check_wraparound, (7 / 8 * 64e6 / 9e10 * 1e6 + 4, axis1), words="no wraparound")
    fails(ex.check_wraparound, (axis1, axis0), words="axis 0's time")
    fails(ex.check_wraparound, 3.0, words="pair")


def test_check_ring_all_to_all(capsys):
    passes(ex.check_ring_all_to_all, 1e9 / (8 * 4.5e10) * 1e3 + 0.008, capsys=capsys)
    fails(ex.check_ring_all_to_all, 15 / 256 * 1e9 / 9e10 * 1e3, words="switch")
    fails(ex.check_ring_all_to_all, 1e9 / (4 * 4.5e10) * 1e3, words="not right")


def test_check_hop_crossover(capsys):
    passes(ex.check_hop_crossover, 8e-6 * 9e10 * 16 / 15, capsys=capsys)  # 768,000 bytes
    fails(ex.check_hop_crossover, 8e-6 * 9e10, words="N - 1")
    fails(ex.check_hop_crossover, 15e-6 * 9e10 * 16 / 15, words="one way")


def test_check_sharp(capsys):
    plain = 2 * 7 / 8 * 1e9 / 4.5e11 + 2 * 7 * 0.6e-6
    sharp = 1e9 / 4.5e11 + 2 * 0.6e-6
    passes(ex.check_sharp, plain / sharp, capsys=capsys)
    fails(ex.check_sharp, 2.0, words="2 \\(N - 1\\)/N")
    fails(ex.check_sharp, 1.3, words="not right")


def test_check_pod_design(capsys):
    # B/N = 512 tokens, α = 4.59e14 / 1.8e11 = 2550: TP needs Y ≤ M_Y·F/α = 11.2·M_Y and
    # FSDP X ≤ B·M_X/α = 822·M_X
    passes(ex.check_pod_design, 1024, 4, 2, 1, capsys=capsys)
    passes(ex.check_pod_design, 256, 16, 1, 2, capsys=capsys)
    fails(ex.check_pod_design, 64, 64, 1, 2, words="tensor parallelism")
    fails(ex.check_pod_design, 4096, 1, 2, 1, words="FSDP")
    fails(ex.check_pod_design, 1024, 4, 2, 2, words="3")
