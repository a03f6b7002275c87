"""Put a topic's run in one process beside its run across processes.

What a check returned becomes a *digest*: plain JSON with every compiled collective (kind, bytes,
group size, dtype, shape, device groups), every memory analysis, and every other number it
measured, by path (``"mlp.train[2]"``). Two digests must be the same, numbers within
:data:`TOLERANCE` (a float32 sum in another order) and everything else exactly; relative errors
against the reference are left out (they differ in the last bits from run to run of the
reduction order). The values the checks compared (:func:`tpviz.core.verify.recording`) must
agree within :data:`TOLERANCE` too, shape for shape.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from tpviz.core.collectives import Collective
from tpviz.core.compiled import Memory

TOLERANCE = 1e-5  # relative to the larger of 1 and the array's largest magnitude


def digest(obj, name: str = ""):
    """``obj`` (a check's result, or a dict or list of them) as plain JSON data; None for what
    is not compared (arrays, which are compared as values; relative errors)."""
    if isinstance(obj, Collective):
        return {"collective": [obj.kind, int(obj.bytes), int(obj.group_size), obj.dtype,
                               list(obj.shape), [list(g) for g in obj.groups]]}
    if isinstance(obj, Memory):
        return {"memory": [obj.argument, obj.output, obj.alias, obj.temp]}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        out = {str(k): digest(v, str(k)) for k, v in obj.items()}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(obj, list | tuple | set | frozenset):
        items = sorted(obj, key=repr) if isinstance(obj, set | frozenset) else obj
        return [digest(v, name) for v in items]
    if isinstance(obj, bool | str) or obj is None:
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return None if "error" in name else float(obj)
    return None


def differences(one, many, path: str = "") -> list[str]:
    """Where digest ``many`` (across processes) differs from ``one`` (one process)."""
    if isinstance(one, dict) and isinstance(many, dict):
        out = [f"{path}.{k}: only in one of the runs" for k in sorted(set(one) ^ set(many))]
        for k in one.keys() & many.keys():
            out += differences(one[k], many[k], f"{path}.{k}" if path else k)
        return out
    if isinstance(one, list) and isinstance(many, list):
        if len(one) != len(many):
            return [f"{path}: {len(many)} items across processes, {len(one)} in one process"]
        return [d for i, (a, b) in enumerate(zip(one, many, strict=True))
                for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(one, float) and isinstance(many, float):
        if math.isclose(one, many, rel_tol=TOLERANCE, abs_tol=TOLERANCE):
            return []
    elif one == many:
        return []
    return [f"{path}: {many!r} across processes, {one!r} in one process"]


def value_difference(one: list[np.ndarray], many: list[np.ndarray]) -> tuple[float, str]:
    """The largest relative difference between the compared values of two runs, and a
    sentence when they cannot be compared (another count or shape, NaN in one only)."""
    if len(one) != len(many):
        return math.inf, f"{len(many)} values compared across processes, {len(one)} in one"
    worst = 0.0
    for i, (a, b) in enumerate(zip(one, many, strict=True)):
        if a.shape != b.shape:
            return math.inf, f"value {i}: shape {b.shape} across processes, {a.shape} in one"
        if not a.size:
            continue
        if not np.array_equal(np.isnan(a), np.isnan(b)):
            return math.inf, f"value {i}: NaN in one run only"
        a, b = np.nan_to_num(a), np.nan_to_num(b)
        worst = max(worst, float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(a))))))
    return worst, ""
