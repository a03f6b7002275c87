"""Megatron-LM tensor parallelism for real: the conjugate operators, the layers, the programs.

Inside ``jax.shard_map`` each device runs the same code on its slice of the weights. The
conjugate operators make the backward pass exact when JAX treats every per-device value as
independent (``check_vma=False``), as Megatron-LM's ``mappings.py`` does in PyTorch:

- ``copy_to_tp_region`` (the paper's **f**): forward identity, backward all-reduce;
- ``reduce_from_tp_region`` (the paper's **g**): forward all-reduce, backward identity.

The same functions with ``axis=None`` and the full weights are the single-device reference.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.core.kinds import ArrayOf, AxisOf, JaxMesh, Keys, Rate, Seed
from tpviz.core.lookups import Map
from tpviz.core.validate import bounded
from tpviz.errors import ShardingError
from tpviz.megatron.plan import AXIS, shapes, specs

MLP = ("w1", "w2")  # the weights of an MLP, and of a block
BLOCK = ("wq", "wk", "wv", "wo", *MLP)
DIMS = {"wq": "H Q", "wk": "H Q", "wv": "H Q", "wo": "Q H", "w1": "H F", "w2": "F H"}

# --- the conjugate operators ------------------------------------------------------------------


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def copy_to_tp_region(x, axis):
    """f: forward identity (every device already holds x), backward all-reduce of the gradient."""
    return x


def _copy_fwd(x, axis):
    return x, None


def _copy_bwd(axis, _, grad):
    return (grad if axis is None else jax.lax.psum(grad, axis),)


copy_to_tp_region.defvjp(_copy_fwd, _copy_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def reduce_from_tp_region(x, axis):
    """g: forward all-reduce of the devices' partial sums, backward identity."""
    return x if axis is None else jax.lax.psum(x, axis)


def _reduce_fwd(x, axis):
    return reduce_from_tp_region(x, axis), None


def _reduce_bwd(axis, _, grad):
    return (grad,)


reduce_from_tp_region.defvjp(_reduce_fwd, _reduce_bwd)

f = copy_to_tp_region  # the Megatron paper's names
g = reduce_from_tp_region


# --- layers (per device; axis=None: one device) ----------------------------------------------

def column_parallel(x: ArrayOf("... H"), w: ArrayOf("H F"), axis: str | None = None):
    """``Tmp = In W1`` with ``W1 = [W1_1 … W1_N]`` split along its columns:
    ``f(x)[., H] @ w[H, F/N]`` gives this device's output columns, no communication forward.
    ``w`` may be a tuple of weights that share the input (a fused QKV layer): one f, one output
    per weight."""
    x = f(x, axis)
    return tuple(x @ one for one in w) if isinstance(w, tuple) else x @ w


def row_parallel(h: ArrayOf("... F"), w: ArrayOf("F H"), axis: str | None = None):
    """``Out = Tmp W2`` with W2 split along its rows: ``h[., F/N] @ w[F/N, H]`` is a partial sum per
    device, all-reduced by g."""
    return g(h @ w, axis)


def mlp(x: ArrayOf("... H"), w1: ArrayOf("H F"), w2: ArrayOf("F H"),
        axis: str | None = None):
    """``Out = gelu(In W1) W2``, W1 column-parallel and W2 row-parallel: one all-reduce forward.
    The matmuls' outputs are named ``"mlp_in"`` and ``"mlp_out"`` for ``jax.checkpoint``
    policies (``save_only_these_names``); a name changes nothing else."""
    hidden = checkpoint_name(column_parallel(x, w1, axis), "mlp_in")
    return checkpoint_name(row_parallel(jax.nn.gelu(hidden), w2, axis), "mlp_out")


def attention(x: ArrayOf("B S H"), wq: ArrayOf("H Q"), wk: ArrayOf("H Q"), wv: ArrayOf("H Q"),
              wo: ArrayOf("Q H"), head_dim: int, axis: str | None = None):
    """Multi-head self-attention over ``x[batch, seq, H]``; each device computes whole heads.

    ``wq, wk, wv: [H, heads/N * head_dim]`` (column-parallel: a device's heads, applied as one
    fused QKV layer, so one f), ``wo: [heads/N * head_dim, H]`` (row-parallel). The projections'
    outputs are named ``"qkv"`` and ``"attention_out"`` for ``jax.checkpoint`` policies."""
    batch, seq, _ = x.shape
    if wq.shape[-1] % head_dim:
        raise ShardingError(f"head_dim = {head_dim} does not divide wq's {wq.shape[-1]} columns "
                            f"(a device's heads × head_dim): give the width of one head.")
    q, k, v = (checkpoint_name(t, "qkv").reshape(batch, seq, -1, head_dim)  # [b, s, heads/N, d]
               for t in column_parallel(x, (wq, wk, wv), axis))
    scores = jnp.einsum("bqnd,bknd->bnqk", q, k) / math.sqrt(head_dim)
    out = jnp.einsum("bnqk,bknd->bqnd", jax.nn.softmax(scores, axis=-1), v)
    return checkpoint_name(row_parallel(out.reshape(batch, seq, -1), wo, axis), "attention_out")


def layer_norm(x: ArrayOf("... H"), eps: Rate = 1e-5):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)


def block(x: ArrayOf("B S H"), params: Keys(*BLOCK, dims=DIMS), head_dim: int,
          axis: str | None = None):
    """A pre-norm transformer block: x + attention(LN x), then + MLP(LN x). 2 all-reduces."""
    x = x + attention(layer_norm(x), params["wq"], params["wk"], params["wv"], params["wo"],
                      head_dim, axis)
    return x + mlp(layer_norm(x), params["w1"], params["w2"], axis)


# --- programs ---------------------------------------------------------------------------------

def init(hidden: int, ffn: int, seed: Seed = 0, kind: str = "block") -> dict[str, np.ndarray]:
    """Full (unsharded) float32 weights of a block (or of an MLP: ``kind="mlp"``)."""
    full = shapes(kind, hidden, ffn)
    bounded("weights (float32 values)", sum(math.prod(s) for s in full.values()), 2**26,
            "Use a smaller hidden or ffn: the weights are built whole in memory.", ShardingError)
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
            for k, s in full.items()}


def _mse(y, target):
    return jnp.mean((y - target) ** 2)


def model(kind: str, head_dim: int = 0):
    """``model(x, params, axis)`` for ``kind`` "mlp" or "block"."""
    specs(kind)  # a clear error for an unknown kind
    if kind == "mlp":
        return lambda x, p, axis=None: mlp(x, p["w1"], p["w2"], axis)
    return lambda x, p, axis=None: block(x, p, head_dim, axis)


def forward(kind: str, mesh: JaxMesh, head_dim: int = 0, axis: AxisOf() = AXIS):
    """The sharded forward pass: ``fn(x, params) -> y`` (x and y replicated)."""
    fn = model(kind, head_dim)
    return jax.shard_map(lambda x, p: fn(x, p, axis), mesh=mesh,
                         in_specs=(P(), specs(kind, axis)), out_specs=P(), check_vma=False)


def train_step(kind: str, mesh: JaxMesh, head_dim: int = 0, axis: AxisOf() = AXIS):
    """Loss and gradients (w.r.t. x and every weight) computed *inside* shard_map on each device,
    as Megatron-LM does: only f and g make them equal to the single-device gradients."""
    fn = model(kind, head_dim)

    def per_device(x, target, params):
        return jax.value_and_grad(lambda x, p: _mse(fn(x, p, axis), target), argnums=(0, 1))(
            x, params)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(), specs(kind, axis)),
                         out_specs=(P(), (P(), specs(kind, axis))), check_vma=False)


def gspmd_train_step(kind: str, mesh: JaxMesh, head_dim: int = 0, axis: AxisOf() = AXIS):
    """The single-device training step given to the compiler with the weights' shardings."""
    fn = model(kind, head_dim)
    weights = {k: NamedSharding(mesh, s) for k, s in specs(kind, axis).items()}
    replicated = NamedSharding(mesh, P())
    step = jax.value_and_grad(lambda x, t, p: _mse(fn(x, p), t), argnums=(0, 2))
    return jax.jit(step, in_shardings=(replicated, replicated, weights))


def reference_step(kind: str, x: ArrayOf("B S H"), target: ArrayOf("B S H"), params: Keys(*MLP,
                   dims=DIMS),
                   head_dim: int = 0):
    """Loss and gradients on one device (float64 inputs give a float64 reference)."""
    fn = model(kind, head_dim)
    return jax.value_and_grad(lambda x, p: _mse(fn(x, p), target), argnums=(0, 1))(x, params)


def place(kind: str, mesh: JaxMesh, params: dict, axis: AxisOf() = AXIS) -> dict:
    """Put the full weights on the mesh, each split as :func:`specs` says."""
    Map(required=tuple(specs(kind, axis)), closed=True).check("params", params, ShardingError)
    return {k: jax.device_put(v, NamedSharding(mesh, specs(kind, axis)[k]))
            for k, v in params.items()}
