"""Figures of sharded arrays: blocks coloured and labelled by the devices that hold them.

``sharding`` draws a *planned* layout (shape, spec, mesh shape: no devices needed); ``array``
extracts the same information from a real ``jax.Array`` and draws it the same way.
"""

from __future__ import annotations

import jax
from matplotlib.figure import Figure

from tpviz.core import layout, validate
from tpviz.core.figures import blocks_figure
from tpviz.core.kinds import Any_, Axes, Dtype, Sizes, SpecLike
from tpviz.core.notation import as_spec, to_notation


def sharding(shape: Sizes(), spec: SpecLike, mesh_shape: layout.MeshShape, *, name: str = "A",
             dtype: Dtype | None = None, ax: Axes | None = None) -> Figure:
    """Draw the planned layout of an array: which mesh positions hold which block.

    Args:
        shape: the global shape (1D or 2D).
        spec: a ``PartitionSpec`` or a notation string such as ``"A[I_X, J_Y]"``.
        mesh_shape: axis name -> size, e.g. ``{"X": 2, "Y": 4}``; device ``Dk`` is the k-th
            position of the mesh in row-major order.
        name: the array's name in the title.
        dtype: when given, the title also states the bytes per device.
    """
    spec = as_spec(spec)
    bs = layout.blocks(shape, spec, mesh_shape)
    title = to_notation(spec, name=name, ndim=len(shape))
    mesh = " × ".join(f"{a}={s}" for a, s in mesh_shape.items())
    title += f" on mesh {mesh}"
    if dtype is not None:
        title += f"\n{layout.bytes_per_device(shape, dtype, spec, mesh_shape):,} bytes per device"
    return blocks_figure(shape, [(b.slices, b.devices) for b in bs], title, ax=ax)


def array(x: Any_, *, name: str = "A", ax: Axes | None = None) -> Figure:
    """Draw a real ``jax.Array``: its blocks and the ids of the devices that hold them.

    Raises:
        ArgumentTypeError: ``x`` is not a ``jax.Array`` (a NumPy array has no devices: place it
            with ``jax.device_put`` first, or draw a plan with :func:`sharding`).
    """
    validate.instance("x", x, jax.Array, "a jax.Array placed on devices",
                      "Place it with jax.device_put(x, NamedSharding(mesh, spec)), or draw the "
                      "plan with tpviz.layouts.draw.sharding(shape, spec, mesh_shape).")
    held: dict[tuple, list[int]] = {}
    for device, index in x.sharding.devices_indices_map(x.shape).items():
        key = tuple((s.start or 0, x.shape[i] if s.stop is None else s.stop)
                    for i, s in enumerate(index))
        held.setdefault(key, []).append(device.id)
    blocks = [(tuple(slice(a, b) for a, b in key), sorted(ids))
              for key, ids in sorted(held.items())]
    spec = getattr(x.sharding, "spec", None)
    title = (to_notation(spec, name=name, ndim=x.ndim) if spec is not None
             else f"{name} ({type(x.sharding).__name__})")
    per = x.addressable_shards[0].data.nbytes
    title += f": {x.dtype}{list(x.shape)}, {per:,} bytes per device"
    return blocks_figure(x.shape, blocks, title, ax=ax)
