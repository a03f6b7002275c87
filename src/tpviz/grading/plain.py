"""Answers as plain data: what leaves a submission's sandbox, and how the judge reads it back.

:func:`encode` turns a value into JSON-ready data, reading only built-in types (a subclass of a
built-in through the built-in's own methods), NumPy arrays and scalars, and a few JAX objects
whose data it copies out (an array and its ``NamedSharding``, a ``PartitionSpec``, a mesh, a
dtype). Anything else raises :class:`NotPlain`: a function, or an object the learner built, is
graded from its source instead (:mod:`tpviz.grading.fnrun`). :func:`decode` builds the values
again from that data alone, in a process that never ran the learner's code, so whatever the
learner's objects would have done on ``==`` or ``float()`` cannot happen there.

Tagged values are one-key dicts: ``{"$tuple": [...]}``, ``{"$array": "<.npy, base64>"}``, ...
"""

from __future__ import annotations

import base64
import io
import json
import sys
from fractions import Fraction

import numpy as np

MAX_BYTES = 32 * 2**20  # of one exercise's encoded answer
MAX_DEPTH = 40
_NUMPY_SCALARS = frozenset(t for t in np.sctypeDict.values()
                           if issubclass(t, np.generic) and t.__module__ == "numpy")


class NotPlain(Exception):
    """The value is not plain data (a function, or an object the learner built)."""


def _npy(a: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, a, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _from_npy(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text, validate=True)), allow_pickle=False)


def _jax():
    return sys.modules.get("jax")


def _mesh(mesh) -> dict:
    return {"ids": np.asarray(mesh.device_ids).tolist(), "axes": [str(a) for a in mesh.axis_names],
            "types": [str(t).rsplit(".", 1)[-1] for t in getattr(mesh, "axis_types", ())]}


def _spec(spec) -> list:
    return [e if e is None or type(e) is str else [str(a) for a in e] for e in tuple(spec)]


def encode(value, depth: int = 0):
    """JSON-ready data for ``value``; :class:`NotPlain` if it is not plain data."""
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    t = type(value)
    if value is None or t in (bool, str, int, float):
        return value
    if value is ... or value is NotImplemented:
        return {"$stub": True}
    for base in (bool, int, float, str):  # a subclass of a built-in: its built-in value
        if issubclass(t, base):
            return getattr(base, f"__{base.__name__}__")(value)
    if t is Fraction:
        return {"$fraction": [value.numerator, value.denominator]}
    if issubclass(t, complex):
        return {"$complex": [complex.__complex__(value).real, complex.__complex__(value).imag]}
    if t in _NUMPY_SCALARS:
        return {"$scalar": _npy(np.asarray(value))}
    if issubclass(t, np.ndarray):
        value = np.array(value, copy=True, subok=False)
        if value.dtype.hasobject:
            raise NotPlain("an array of Python objects")
        return {"$array": _npy(value)}
    for base, tag in ((list, None), (tuple, "$tuple"), (set, "$set"), (frozenset, "$frozenset")):
        if issubclass(t, base):
            items = [encode(v, depth + 1) for v in base.__iter__(value)]
            return items if tag is None else {tag: items}
    if issubclass(t, dict):
        pairs = [(encode(k, depth + 1), encode(v, depth + 1)) for k, v in dict.items(value)]
        if all(type(k) is str and not k.startswith("$") for k, _ in pairs):
            return dict(pairs)
        return {"$dict": [list(p) for p in pairs]}
    return _encode_jax(value, t)


def _encode_jax(value, t):
    jax = _jax()
    if jax is None:
        raise NotPlain(t.__name__)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if t is PartitionSpec:
        return {"$spec": _spec(value)}
    if t is Mesh:
        return {"$mesh": _mesh(value)}
    if t is NamedSharding:
        return {"$named": {"mesh": _mesh(value.mesh), "spec": _spec(value.spec)}}
    if t is type(jax.numpy.zeros(())):
        if not value.is_fully_addressable:
            raise NotPlain("an array split across processes")
        out = {"data": _npy(np.asarray(jax.device_get(value)))}
        if type(value.sharding) is NamedSharding:
            out["sharding"] = {"mesh": _mesh(value.sharding.mesh),
                               "spec": _spec(value.sharding.spec)}
        return {"$jax": out}
    if (isinstance(value, type) and issubclass(value, np.generic)) or t is np.dtype:
        return {"$dtype": np.dtype(value).name}
    raise NotPlain(t.__name__)


def dumps(value) -> str:
    text = json.dumps(encode(value), allow_nan=True)
    if len(text) > MAX_BYTES:
        raise NotPlain(f"more than {MAX_BYTES // 2**20} MiB of data")
    return text


# --- reading it back (the judge, and the function runner's values) --------------------------

def _build_mesh(data: dict):
    from jax.sharding import AxisType, Mesh

    from tpviz.devices import chosen_devices

    devices = {d.id: d for d in chosen_devices()}
    ids = np.asarray(data["ids"], dtype=int)
    types = tuple(getattr(AxisType, t) for t in data.get("types") or [])
    grid = np.vectorize(devices.__getitem__, otypes=[object])(ids)
    return Mesh(grid, tuple(data["axes"]), **({"axis_types": types} if types else {}))


def _build_spec(entries: list):
    from jax.sharding import PartitionSpec

    return PartitionSpec(*(e if e is None or isinstance(e, str) else tuple(e) for e in entries))


def decode(data):
    """The value :func:`encode` described (new objects, made here from the data alone)."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if len(data) != 1 or not next(iter(data)).startswith("$"):
        return {k: decode(v) for k, v in data.items()}
    (tag, body), = data.items()
    simple = {"$stub": lambda b: ..., "$tuple": lambda b: tuple(decode(v) for v in b),
              "$set": lambda b: {decode(v) for v in b},
              "$frozenset": lambda b: frozenset(decode(v) for v in b),
              "$dict": lambda b: {decode(k): decode(v) for k, v in b},
              "$fraction": lambda b: Fraction(int(b[0]), int(b[1])),
              "$complex": lambda b: complex(float(b[0]), float(b[1])),
              "$array": _from_npy, "$scalar": lambda b: _from_npy(b)[()],
              "$dtype": lambda b: np.dtype(str(b))}
    if tag in simple:
        return simple[tag](body)
    if tag == "$spec":
        return _build_spec(body)
    if tag == "$mesh":
        return _build_mesh(body)
    if tag == "$named":
        from jax.sharding import NamedSharding

        return NamedSharding(_build_mesh(body["mesh"]), _build_spec(body["spec"]))
    if tag == "$jax":
        import jax
        from jax.sharding import NamedSharding

        array = _from_npy(body["data"])
        if "sharding" in body:
            s = body["sharding"]
            return jax.device_put(array, NamedSharding(_build_mesh(s["mesh"]),
                                                       _build_spec(s["spec"])))
        return jax.numpy.asarray(array)
    raise ValueError(f"unknown tag {tag!r} in an answer")


def loads(text: str):
    return decode(json.loads(text))
