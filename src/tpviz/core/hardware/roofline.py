"""Rooflines and the thresholds that follow from them.

A step takes ``max(T_math, T_hbm, T_comms)`` when the three overlap: FLOPs / C, HBM bytes /
W_hbm and collective bytes / W. Its **arithmetic intensity** is FLOPs per byte; it is
compute-bound when that exceeds the **ridge** C / W of the resource (austin2025scaling,
"All About Rooflines"). The thresholds below are the Scaling Book's ("How to Parallelize a
Transformer for Training"), for one MLP block ``In[B, D] · W_in[D, F] · W_out[F, D]`` in bf16,
with α = C / W_ici the ICI intensity (2550 on v5p: 4.59e14 / 1.8e11) and W_ici the
bidirectional bandwidth of one axis with wraparound (twice one link).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpviz.core import validate
from tpviz.core.kinds import Amount, Devices, Rate


def _rate(name: str, value) -> float:
    return validate.number(name, value, positive=True)


def _count(name: str, value) -> int:
    return validate.integer(name, value, maximum=10**15)


@dataclass(frozen=True)
class Roofline:
    """Time of a computation on one chip: the larger of compute and HBM time."""

    chip: str
    flops: float
    nbytes: float
    compute_s: float
    memory_s: float
    ridge: float

    @property
    def intensity(self) -> float:
        """FLOPs per HBM byte."""
        return self.flops / self.nbytes if self.nbytes else float("inf")

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        """``"compute"`` when FLOPs take at least as long as the bytes, else ``"memory"``."""
        return "compute" if self.compute_s >= self.memory_s else "memory"


def roofline(name: str, flops: Amount, nbytes: Amount, dtype: str = "bf16") -> Roofline:
    """The roofline of ``flops`` FLOPs that read and write ``nbytes`` bytes of HBM on chip
    ``name`` (a key of ``CHIPS`` or ``SYSTEMS``) at its peak for ``dtype``."""
    from tpviz.core.hardware.systems import chip_of

    chip = chip_of(name)
    f = validate.number("flops", flops, minimum=0)
    b = validate.number("nbytes", nbytes, minimum=0)
    return Roofline(chip.name, f, b, f / chip.peak(dtype), b / chip.hbm_bandwidth,
                    chip.ridge(dtype))


def matmul_intensity(b: int, d: int, f: int, itemsize: int = 2) -> float:
    """FLOPs per byte of ``X[B, D] · W[D, F]``: 2BDF / (itemsize·(BD + DF + BF)); about B when
    B ≪ D, F, so a bf16 matmul is compute-bound once the batch passes the ridge."""
    b, d, f = _count("b", b), _count("d", d), _count("f", f)
    itemsize = validate.integer("itemsize", itemsize, maximum=16)
    return 2 * b * d * f / (itemsize * (b * d + d * f + b * f))


def data_parallel_batch(flops: Rate, bandwidth: Rate, axes: int = 1) -> float:
    """Per-device batch (tokens) above which pure data parallelism (and FSDP) is compute-bound:
    ``B/X > C / (W_ici · M_X)``.

    Data parallelism communicates in the backward pass only: the all-reduce of both weights'
    gradients, T_comms = 2·2·2·D·F/(W·M_X), against the backward's T_math = 8·B·D·F/(X·C).
    FSDP also gathers both weights forward, T_comms = 4·D·F/(W·M_X) against
    T_math = 4·B·D·F/(X·C): the same ratio. T_math > T_comms gives B/X > C/(W·M_X) with M_X
    the torus axes the data axis spans.
    """
    return _rate("flops", flops) / (_rate("bandwidth", bandwidth) * _count("axes", axes))


fsdp_batch = data_parallel_batch  # FSDP moves weights like data parallelism moves gradients


def tensor_parallel_limit(flops: Rate, bandwidth: Rate, ffn: int, axes: int = 1) -> float:
    """Largest tensor-parallel degree Y that stays compute-bound: ``Y < M_Y · F / α``.

    Forward: T_math = 4·B·D·F/(Y·C); the activations' all-gather and reduce-scatter,
    T_comms = 4·B·D/(W·M_Y). T_math > T_comms gives F/Y > C/(W·M_Y), independent of B.
    """
    return (_count("axes", axes) * _count("ffn", ffn) * _rate("bandwidth", bandwidth)
            / _rate("flops", flops))


def mixed_batch(flops: Rate, bandwidth: Rate, ffn: int, axes_x: int = 1,
                axes_y: int = 1) -> float:
    """Per-device batch above which mixed FSDP (X) + tensor parallelism (Y), N = X·Y, can stay
    compute-bound: ``B/N > α² / (M_X · M_Y · F)`` (the Scaling Book's current derivation).

    T_FSDP = 4·D·F/(Y·W·M_X), T_TP = 4·B·D/(X·W·M_Y), T_math = 4·B·D·F/(N·C). The larger comms
    term is smallest when the two are equal, at X_opt = sqrt(B·M_X·N/(F·M_Y)); there
    T_math/T_comms = sqrt(B·F·M_X·M_Y/N)/α, above 1 iff B/N > α²/(M_X·M_Y·F).
    """
    alpha = _rate("flops", flops) / _rate("bandwidth", bandwidth)
    return alpha * alpha / (_count("axes_x", axes_x) * _count("axes_y", axes_y)
                            * _count("ffn", ffn))


def best_fsdp(batch: Rate, ffn: int, devices: Devices, axes_x: int = 1, axes_y: int = 1
              ) -> float:
    """X_opt = sqrt(B/F · M_X/M_Y · N): the FSDP degree that balances the two comms terms."""
    batch, ffn = _rate("batch", batch), _count("ffn", ffn)
    ratio = _count("axes_x", axes_x) / _count("axes_y", axes_y)
    return (batch / ffn * ratio * _count("devices", devices)) ** 0.5
