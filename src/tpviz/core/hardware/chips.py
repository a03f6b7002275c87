"""Chips: peak FLOP/s, HBM capacity and HBM bandwidth of one accelerator.

Every number cites a key of ``references.bib``. FLOP/s are dense (no structured sparsity).
TPU numbers are the Scaling Book's TPU table (austin2025scaling, "How to Think About TPUs"),
which rounds Google Cloud's pages (google2024tpuv5p: 459 TFLOP/s, 95 GiB, 2,765 GB/s;
google2023tpuv4: 275 TFLOP/s, 32 GiB, 1,200 GB/s); GPU
numbers are NVIDIA's datasheets (SXM parts).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Chip:
    """One accelerator.

    Attributes:
        name: e.g. ``"TPU v5e"``.
        flops: peak dense FLOP/s by element type, e.g. ``{"bf16": 1.97e14, "int8": 3.94e14}``.
        hbm_bytes: HBM capacity in bytes.
        hbm_bandwidth: HBM bandwidth in bytes/s.
        source: the ``references.bib`` key of these numbers.
    """

    name: str
    flops: dict[str, float] = field(hash=False)
    hbm_bytes: float
    hbm_bandwidth: float
    source: str

    def peak(self, dtype: str = "bf16") -> float:
        """Peak FLOP/s for ``dtype`` ("bf16", "int8" or "fp8" where the chip has it)."""
        from tpviz.core import validate

        return self.flops[validate.choice("dtype", dtype, self.flops)]

    def ridge(self, dtype: str = "bf16") -> float:
        """The roofline's ridge point: FLOPs per HBM byte where compute time equals memory time,
        ``C / W_hbm`` (about 243 for a v5e in bf16)."""
        return self.peak(dtype) / self.hbm_bandwidth


CHIPS = {c.name: c for c in (
    # TPU table of the Scaling Book: v5e 1.97e14 bf16, 3.94e14 int8, 16 GB, 8.1e11 B/s
    Chip("TPU v5e", {"bf16": 1.97e14, "int8": 3.94e14}, 16e9, 8.1e11, "austin2025scaling"),
    # v5p: 4.59e14 bf16, 9.18e14 int8, 96 GB, 2.8e12 B/s
    Chip("TPU v5p", {"bf16": 4.59e14, "int8": 9.18e14}, 96e9, 2.8e12, "austin2025scaling"),
    # v6e (Trillium): 9.2e14 bf16, 1.84e15 int8, 32 GB, 1.6e12 B/s
    Chip("TPU v6e", {"bf16": 9.2e14, "int8": 1.84e15}, 32e9, 1.6e12, "austin2025scaling"),
    # v4p: 2.75e14 bf16 and int8, 32 GB, 1.2e12 B/s (austin2025scaling; Google's v4 page,
    # google2023tpuv4: 275 TFLOP/s bf16 or int8, 32 GiB HBM2 at 1,200 GB/s)
    Chip("TPU v4p", {"bf16": 2.75e14, "int8": 2.75e14}, 32e9, 1.2e12, "austin2025scaling"),
    # H100 SXM datasheet: 989 TFLOP/s dense bf16, 1979 dense fp8, 80 GB HBM3 at 3.35 TB/s
    Chip("H100", {"bf16": 9.89e14, "fp8": 1.979e15}, 80e9, 3.35e12, "nvidia2023h100"),
    # A100 SXM 80GB datasheet: 312 TFLOP/s bf16, 624 int8, 80 GB HBM2e at 2,039 GB/s
    Chip("A100", {"bf16": 3.12e14, "int8": 6.24e14}, 80e9, 2.039e12, "nvidia2021a100"),
    # B200, the Scaling Book's GPU table: 2.3e15 bf16, 4.5e15 fp8, 192 GB, 8.0e12 B/s
    Chip("B200", {"bf16": 2.3e15, "fp8": 4.5e15}, 192e9, 8.0e12, "austin2025scaling"),
)}
