"""``SYSTEMS``: every TPU generation and GPU node design by name, and the chip behind a name."""

from __future__ import annotations

from tpviz.core.hardware.chips import CHIPS, Chip
from tpviz.core.hardware.gpu import GPUS, GpuSystem
from tpviz.core.hardware.tpu import TPUS, TpuSystem
from tpviz.core.kinds import Of

SYSTEMS: dict[str, TpuSystem | GpuSystem] = {**TPUS, **GPUS}


def chip_of(name: Of(str, Chip, TpuSystem, GpuSystem)) -> Chip:
    """The :class:`Chip` of a name in ``CHIPS`` or ``SYSTEMS`` (or a Chip or system itself)."""
    from tpviz.core import validate

    if isinstance(name, Chip):
        return name
    if isinstance(name, TpuSystem | GpuSystem):
        return name.chip
    if name in SYSTEMS:
        return SYSTEMS[name].chip
    return CHIPS[validate.choice("name", name, [*CHIPS, *SYSTEMS])]
