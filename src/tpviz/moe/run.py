"""The MoE layer run three ways: expert-parallel by hand (``shard_map`` + ``all_to_all``), as
GShard's einsums left to the compiler (GSPMD), and on one device (the reference).

Weights: ``router[H, E]``, ``w_in[E, H, F]``, ``w_out[E, F, H]``; expert e is
``FFN_e(x) = gelu(x w_in[e]) w_out[e]``. The layer returns ``y = x + Σ_j g_j FFN_{e_j}(x)`` over
the kept choices and the load-balancing loss (:func:`tpviz.moe.plan.aux_loss`, averaged over the
groups). Tokens are split into N groups, one per device; capacity and drops are per group.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.core.kinds import ArrayOf, AxisOf, JaxMesh, Keys, Positive, Seed
from tpviz.core.validate import bounded
from tpviz.errors import ArgumentError, ShardingError
from tpviz.moe.plan import AXIS, ORDERS, capacity, keep, top_k

AUX_WEIGHT = 0.01  # λ, Switch's weight of the load-balancing loss
WEIGHTS = ("router", "w_in", "w_out")  # the layer's weights (init)
DIMS = {"router": "H E", "w_in": "E H F", "w_out": "E F H"}


def init(hidden: int, ffn: int, experts: int, seed: Seed = 0) -> dict[str, np.ndarray]:
    """Full (unsharded) float32 weights: ``router[H, E]``, ``w_in[E, H, F]``, ``w_out[E, F, H]``."""
    bounded("experts × hidden × ffn (two such float32 weights)", experts * hidden * ffn, 2**25,
            "Use fewer or smaller experts.")
    rng = np.random.default_rng(seed)
    return {"router": rng.standard_normal((hidden, experts)).astype(np.float32),
            "w_in": (rng.standard_normal((experts, hidden, ffn)) / np.sqrt(hidden)).astype(
                np.float32),
            "w_out": (rng.standard_normal((experts, ffn, hidden)) / np.sqrt(ffn)).astype(
                np.float32)}


def specs(axis: str = AXIS) -> dict[str, P]:
    """Expert parallelism: the router replicated, the experts split over ``axis`` (E/N each)."""
    return {"router": P(), "w_in": P(axis), "w_out": P(axis)}


def _check_axis(mesh, axis: str) -> None:
    names = tuple(getattr(mesh, "axis_names", ()))
    if axis not in names:
        raise ShardingError(f"the mesh has axes {names}, no {axis!r}: expert parallelism splits "
                            f"the experts over it. Make the mesh with "
                            f"tpviz.make_mesh((N,), ({axis!r},)), or pass axis=<one of "
                            f"{names}>.")


def _check_order(order: str) -> None:
    if order not in ORDERS:
        raise ArgumentError(f"order={order!r}: use 'before' (softmax, then top-k) or 'after'.")


def dispatch_tensors(logits, k: int, c: int, order: str = "before", weight: float = AUX_WEIGHT):
    """One group's routing as GShard's tensors: ``dispatch[T_g, E, C]`` (1 where token s sits in
    slot c of expert e), ``combine[T_g, E, C]`` (the same, times the gate) and the aux loss."""
    s, e = logits.shape  # logits: f32[T_g, E], one group
    probs = jax.nn.softmax(logits, axis=-1)
    top, experts = jax.lax.top_k(logits, k)  # [T_g, k]: first choice first
    gates = (jnp.take_along_axis(probs, experts, axis=1) if order == "before"
             else jax.nn.softmax(top, axis=-1))
    onehot = jax.nn.one_hot(experts, e, dtype=jnp.int32)  # [T_g, k, E]
    choice_major = onehot.transpose(1, 0, 2).reshape(k * s, e)  # every 1st choice, then 2nd...
    slot = ((jnp.cumsum(choice_major, axis=0) * choice_major).sum(-1) - 1).reshape(k, s).T
    place = onehot[..., None] * jax.nn.one_hot(slot, c, dtype=jnp.int32)[:, :, None, :]
    dispatch = place.sum(1).astype(logits.dtype)  # [T_g, E, C]; slot >= C: all zeros (dropped)
    combine = (place * gates[..., None, None]).sum(1)  # [T_g, E, C]
    f = onehot.sum((0, 1)) / (s * k)  # fraction of the choices per expert (not differentiable)
    aux = weight * e * jnp.sum(f * probs.mean(0))
    return dispatch, combine, aux


def _ffn(x, w_in, w_out):
    """Experts applied to their slots: ``x[..., E', C, H]`` with ``w_in[E', H, F]``."""
    return jnp.einsum("...ecf,efh->...ech",
                      jax.nn.gelu(jnp.einsum("...ech,ehf->...ecf", x, w_in)), w_out)


# --- (a) expert parallelism by hand: shard_map and two all-to-alls ----------------------------

def layer(x: ArrayOf("T H"), params: Keys(*WEIGHTS, dims=DIMS), k: int, c: int,
          order: str = "before",
          axis: str = AXIS):
    """One device's part of the expert-parallel layer (call inside ``shard_map``)."""
    n = jax.lax.axis_size(axis)
    h = x.shape[1]  # x: f32[T_g, H], this device's group of tokens
    e = params["router"].shape[1]
    dispatch, combine, aux = dispatch_tensors(x @ params["router"], k, c, order)  # [T_g, E, C]
    buffer = jnp.einsum("sec,sh->ech", dispatch, x)  # [E, C, H]: every expert's slots
    buffer = buffer.reshape(n, e // n, c, h)  # [N, E/N, C, H]: by the device that holds them
    # dispatch: the rows for device d go to d; we receive our experts' slots from every group
    received = jax.lax.all_to_all(buffer, axis, 0, 0)  # [N groups, E/N, C, H]
    out = _ffn(received, params["w_in"], params["w_out"])  # [N groups, E/N, C, H]
    # combine: each group's results go back to the device that holds the group
    back = jax.lax.all_to_all(out, axis, 0, 0).reshape(e, c, h)  # [E, C, H]
    y = x + jnp.einsum("sec,ech->sh", combine, back)  # [T_g, H]
    return y, jax.lax.pmean(aux, axis)


def forward(mesh: JaxMesh, k: int, c: int, order: str = "before", axis: AxisOf() = AXIS):
    """``fn(x, params) -> (y, aux)`` expert-parallel: tokens ``x[T, H]`` split over ``axis``
    (data-parallel), experts split E/N per device, dispatch and combine by all-to-all."""
    _check_order(order)
    _check_axis(mesh, axis)
    return jax.jit(jax.shard_map(lambda x, p: layer(x, p, k, c, order, axis), mesh=mesh,
                                 in_specs=(P(axis), specs(axis)), out_specs=(P(axis), P())))


def _loss(fn):
    def loss(x, target, params):
        y, aux = fn(x, params)
        return jnp.mean((y - target) ** 2) + aux
    return loss


def train_step(mesh: JaxMesh, k: int, c: int, order: str = "before", axis: AxisOf() = AXIS):
    """``fn(x, target, params) -> (loss, (grad_x, grads))``: mean squared error plus the aux
    loss; the backward pass of each all-to-all is an all-to-all."""
    return jax.jit(jax.value_and_grad(_loss(forward(mesh, k, c, order, axis)), argnums=(0, 2)))


# --- (b) GShard's einsums, the expert dimension sharded; the compiler adds the communication ---

def gshard_layer(x: ArrayOf("G T H"), params: Keys(*WEIGHTS, dims=DIMS), k: int, c: int,
                 order: str = "before",
                 mesh: JaxMesh | None = None,
                 axis: str = AXIS, reshard: bool = True):
    """The layer on ``x[G, T_g, H]`` (GShard's ``[G, S, M]``) as GShard writes it
    (``"GSEC,GSM->EGCM"``). With a mesh, the groups G and the experts E are sharded over
    ``axis`` and GSPMD chooses how to move the tokens; ``reshard`` also pins the dispatched
    buffer to G-split before it is E-split (and back), the resharding GShard turns into an
    all-to-all."""
    def constrain(v, spec):
        return v if mesh is None else jax.lax.with_sharding_constraint(v, NamedSharding(mesh, spec))

    logits = jnp.einsum("gsh,he->gse", x, params["router"])
    dispatch, combine, aux = jax.vmap(lambda lg: dispatch_tensors(lg, k, c, order))(logits)
    # dispatch, combine: [G, T_g, E, C]
    buffer = jnp.einsum("gsec,gsh->egch", dispatch, x)  # [E, G, C, H]
    if reshard:  # computed where the groups are (G split), then resharded to E split
        buffer = constrain(buffer, P(None, axis))
    buffer = constrain(buffer, P(axis))  # the experts' slots where the experts are
    out = _ffn(buffer.transpose(1, 0, 2, 3), params["w_in"], params["w_out"])  # [G, E, C, H]
    out = constrain(out, P(None, axis))  # E split (the experts computed where they are)
    if reshard:
        out = constrain(out, P(axis))  # resharded back: G split, where the groups are
    y = constrain(x + jnp.einsum("gsec,gech->gsh", combine, out), P(axis))  # [G, T_g, H]
    return y, aux.mean()


def gspmd_forward(mesh: JaxMesh, k: int, c: int, order: str = "before", axis: AxisOf() = AXIS,
                  reshard: bool = True):
    """``fn(x, params) -> (y, aux)`` with ``x[T, H]`` split over ``axis``, weights as
    :func:`specs`; the einsum form under ``jax.jit``."""
    _check_order(order)
    _check_axis(mesh, axis)
    n = mesh.shape[axis]

    def fn(x, params):
        t, h = x.shape
        y, aux = gshard_layer(x.reshape(n, t // n, h), params, k, c, order, mesh, axis,
                              reshard)
        return y.reshape(t, h), aux

    weights = {name: NamedSharding(mesh, s) for name, s in specs(axis).items()}
    return jax.jit(fn, in_shardings=(NamedSharding(mesh, P(axis)), weights),
                   out_shardings=(NamedSharding(mesh, P(axis)), NamedSharding(mesh, P())))


def gspmd_train_step(mesh: JaxMesh, k: int, c: int, order: str = "before",
                     axis: AxisOf() = AXIS):
    """Loss and gradients of the GSPMD form."""
    return jax.jit(jax.value_and_grad(_loss(gspmd_forward(mesh, k, c, order, axis)),
                                      argnums=(0, 2)))


# --- the single-device reference ----------------------------------------------------------------

def router_logits(x, params: dict) -> np.ndarray:
    """``x @ router`` as the compiled programs compute it (XLA's float32 matmul, not NumPy's,
    so that near-ties rank the experts the same way)."""
    return np.asarray(jax.jit(jnp.matmul)(x, params["router"]))


def _routing(x, params: dict, k: int, capacity_factor: float, groups: int, order: str):
    """Choices, drops and each group's fraction of choices per expert, from the NumPy routing of
    :mod:`tpviz.moe.plan` (concrete arrays)."""
    t = x.shape[0]
    e = params["router"].shape[1]
    experts, _ = top_k(router_logits(x, params), k, order)
    kept = keep(experts, e, capacity(t // groups, e, k, capacity_factor), groups)
    f = np.stack([np.bincount(g.ravel(), minlength=e) for g in experts.reshape(groups, -1)])
    return experts, kept, (f / (t // groups * k)).astype(np.float32)  # f: [G, E]


@partial(jax.jit, static_argnames=("order", "weight"))
def _reference(x, params: dict, experts, kept, f, order: str, weight: float):
    e, groups = params["router"].shape[1], f.shape[0]
    lg = x @ params["router"]
    probs = jax.nn.softmax(lg, axis=-1)
    gates = (jnp.take_along_axis(probs, experts, axis=1) if order == "before"
             else jax.nn.softmax(jnp.take_along_axis(lg, experts, axis=1), axis=-1))
    hidden = jax.nn.gelu(jnp.einsum("th,tkhf->tkf", x, params["w_in"][experts]))
    out = jnp.einsum("tkf,tkfh->tkh", hidden, params["w_out"][experts])  # [T, k, H]
    y = x + jnp.einsum("tk,tkh->th", gates * kept, out)  # dropped choices add nothing
    aux = weight * e * jnp.mean(jnp.sum(f * probs.reshape(groups, -1, e).mean(1), axis=-1))
    return y, aux


def reference(x: ArrayOf("T H"), params: Keys(*WEIGHTS, dims=DIMS), k: int,
              capacity_factor: Positive,
              groups: int,
              order: str = "before", weight: float = AUX_WEIGHT):
    """The layer token by token on one device: each token's k choices and the drop rule come
    from the NumPy routing of :mod:`tpviz.moe.plan`; each kept choice adds ``g · FFN_e(x)``
    with the expert's weights gathered for that token (no dispatch tensors, no capacity
    slots). Returns ``(y, aux)``."""
    _check_order(order)
    routing = _routing(x, params, k, capacity_factor, groups, order)
    return _reference(x, params, *routing, order, weight)


def reference_step(x: ArrayOf("T H"), target: ArrayOf("T H"), params: Keys(*WEIGHTS, dims=DIMS),
                   k: int,
                   capacity_factor: Positive,
                   groups: int,
                   order: str = "before", weight: float = AUX_WEIGHT):
    """Loss and gradients of the reference (w.r.t. x and the weights); the choices and drops
    are constants of the routing, as in the sharded programs."""
    _check_order(order)
    experts, kept, f = _routing(x, params, k, capacity_factor, groups, order)

    def loss(x, params):
        y, aux = _reference(x, params, experts, kept, f, order, weight)
        return jnp.mean((y - target) ** 2) + aux
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(x, params)


def place(mesh: JaxMesh, params: Keys(*WEIGHTS, closed=True), axis: AxisOf() = AXIS) -> dict:
    """The weights on the mesh: router on every device, experts split E/N per device."""
    return {name: jax.device_put(v, NamedSharding(mesh, specs(axis)[name]))
            for name, v in params.items()}
