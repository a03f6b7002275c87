"""The one source of hardware truth: chips, TPU slices, GPU clusters, and the price of a
collective on them; rooflines, the thresholds that follow, and model specs.

- ``chips``: :class:`Chip` (FLOP/s by dtype, HBM bytes and bandwidth) and ``CHIPS``;
- ``tpu``: :func:`tpu` (a torus slice with the generation's wraparound rule: v4p, v5e, v5p,
  v6e), ``TPUS``, a group of chips on its own torus axes (:meth:`TpuSystem.group`), and
  permutes routed by distance and ports (:meth:`TpuSlice.send`, :meth:`TpuSlice.permute`,
  with ``route``);
- ``gpu``: :func:`gpu_cluster` (NVLink nodes, NICs, SHARP) and ``GPUS``;
- ``price``: :class:`Price`, a collective's latency and bandwidth terms (added: the α–β
  model; ``overlapped_s`` is the max() form) and what bounds it;
- ``roofline``: :func:`roofline` and the thresholds of data, tensor, FSDP and mixed parallelism;
- ``models``: :class:`Model` and ``MODELS`` (GPT-3, LLaMA-2/3, Mixtral), FLOPs per token in
  three conventions (full attention, causal, 6N).

``SYSTEMS`` maps every TPU and GPU name to its system. Pure Python: no devices.
"""

from tpviz.core.hardware.chips import CHIPS, Chip
from tpviz.core.hardware.gpu import GPUS, GpuCluster, GpuSystem, gpu_cluster
from tpviz.core.hardware.models import MODELS, Model
from tpviz.core.hardware.price import KINDS, Price
from tpviz.core.hardware.roofline import (
    Roofline,
    best_fsdp,
    data_parallel_batch,
    fsdp_batch,
    matmul_intensity,
    mixed_batch,
    roofline,
    tensor_parallel_limit,
)
from tpviz.core.hardware.systems import SYSTEMS, chip_of
from tpviz.core.hardware.tpu import TPUS, TpuSlice, TpuSystem, tpu

__all__ = ["CHIPS", "GPUS", "KINDS", "MODELS", "SYSTEMS", "TPUS", "Chip", "GpuCluster",
           "GpuSystem", "Model", "Price", "Roofline", "TpuSlice", "TpuSystem", "best_fsdp",
           "chip_of", "data_parallel_batch", "fsdp_batch", "gpu_cluster", "matmul_intensity",
           "mixed_batch", "roofline", "tensor_parallel_limit", "tpu"]
