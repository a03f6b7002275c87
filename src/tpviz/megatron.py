"""Megatron-LM tensor parallelism: the sharded MLP, attention and transformer block.

Inside ``jax.shard_map`` each device runs the same code on its slice of the weights:

- the first matmul of a block is **column-parallel** (``A[H, F_N]``: each device a slice of the
  outputs), so the nonlinearity applies per device;
- the second is **row-parallel** (``B[F_N, H]``): each device a partial sum, added by an
  all-reduce;
- the conjugate operators **f** (forward: identity, backward: all-reduce) and **g** (forward:
  all-reduce, backward: identity) make the backward pass exact, because with
  ``check_vma=False`` JAX treats every per-device value as independent.

The same functions with ``axis=None`` and the full weights are the single-device reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz import hlo, layout
from tpviz.errors import ShardingError

AXIS = "model"


# --- the conjugate operators ------------------------------------------------------------------

@partial(jax.custom_vjp, nondiff_argnums=(1,))
def f(x, axis):
    """Enter a tensor-parallel region: forward identity, backward all-reduce of the gradient."""
    return x


def _f_fwd(x, axis):
    return x, None


def _f_bwd(axis, _, grad):
    return (grad if axis is None else jax.lax.psum(grad, axis),)


f.defvjp(_f_fwd, _f_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def g(x, axis):
    """Leave a tensor-parallel region: forward all-reduce of partial sums, backward identity."""
    return x if axis is None else jax.lax.psum(x, axis)


def _g_fwd(x, axis):
    return g(x, axis), None


def _g_bwd(axis, _, grad):
    return (grad,)


g.defvjp(_g_fwd, _g_bwd)


# --- layers (per device; axis=None: one device) ----------------------------------------------

def column_parallel(x, w):
    """``x[., H] @ w[H, F/N]``: this device's output columns, no communication."""
    return x @ w


def row_parallel(h, w, axis):
    """``h[., F/N] @ w[F/N, H]``: a partial sum per device, all-reduced by g."""
    return g(h @ w, axis)


def mlp(x, a, b, axis=None):
    """``Z = gelu(X A) B`` with A column-parallel and B row-parallel: one all-reduce forward."""
    return row_parallel(jax.nn.gelu(column_parallel(f(x, axis), a)), b, axis)


def attention(x, wq, wk, wv, wo, head_dim: int, axis=None):
    """Multi-head self-attention over ``x[batch, seq, H]``; each device computes whole heads.

    ``wq, wk, wv: [H, heads/N * head_dim]`` (column-parallel: a device's heads),
    ``wo: [heads/N * head_dim, H]`` (row-parallel)."""
    x = f(x, axis)
    batch, seq, _ = x.shape

    def heads(w):  # [batch, seq, local heads, head_dim]
        return column_parallel(x, w).reshape(batch, seq, -1, head_dim)

    q, k, v = heads(wq), heads(wk), heads(wv)
    scores = jnp.einsum("bqnd,bknd->bnqk", q, k) / math.sqrt(head_dim)
    out = jnp.einsum("bnqk,bknd->bqnd", jax.nn.softmax(scores, axis=-1), v)
    return row_parallel(out.reshape(batch, seq, -1), wo, axis)


def layer_norm(x, eps: float = 1e-5):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)


def block(x, params: dict, head_dim: int, axis=None):
    """A pre-norm transformer block: x + attention(LN x), then + MLP(LN x). 2 all-reduces."""
    x = x + attention(layer_norm(x), params["wq"], params["wk"], params["wv"], params["wo"],
                      head_dim, axis)
    return x + mlp(layer_norm(x), params["a"], params["b"], axis)


# --- plan ---------------------------------------------------------------------------------------

MLP_SPECS = {"a": P(None, AXIS), "b": P(AXIS, None)}
BLOCK_SPECS = {"wq": P(None, AXIS), "wk": P(None, AXIS), "wv": P(None, AXIS), "wo": P(AXIS, None),
               **MLP_SPECS}


@dataclass(frozen=True)
class Plan:
    """Shapes, bytes and communication of one Megatron block on N devices (no devices needed)."""

    tokens: int  # batch x sequence
    hidden: int
    ffn: int
    heads: int
    devices: int
    dtype: str
    weights: dict[str, tuple[tuple[int, int], tuple[int, int]]]  # name -> (full, per device)
    weight_bytes: int  # whole block
    weight_bytes_per_device: int
    all_reduce_bytes: int  # one all-reduce: tokens x hidden elements
    forward_all_reduces: int = 2  # per block: after attention, after the MLP (g)
    backward_all_reduces: int = 2  # per block: before attention, before the MLP (f)

    @property
    def ring_bytes_per_step(self) -> float:
        """Bytes each device sends per block per training step with ring all-reduces."""
        n = self.devices
        count = self.forward_all_reduces + self.backward_all_reduces
        return count * 2 * (n - 1) / n * self.all_reduce_bytes


def _shapes(hidden: int, ffn: int) -> dict[str, tuple[int, int]]:
    """Full shapes of a block's weights: attention projections, then the MLP's A and B."""
    return {"wq": (hidden, hidden), "wk": (hidden, hidden), "wv": (hidden, hidden),
            "wo": (hidden, hidden), "a": (hidden, ffn), "b": (ffn, hidden)}


def plan(tokens: int, hidden: int, ffn: int, heads: int, devices: int,
         dtype="bf16") -> Plan:
    """Per-device shapes and bytes of a Megatron block split over ``devices``.

    Raises:
        ShardingError: heads or the feed-forward width not divisible by the devices, or the
            hidden size not divisible by the heads.
    """
    for name, value in (("tokens", tokens), ("hidden", hidden), ("ffn", ffn), ("heads", heads),
                        ("devices", devices)):
        if not isinstance(value, int) or value < 1:
            raise ShardingError(f"{name} must be a positive integer, got {value!r}.")
    if hidden % heads:
        raise ShardingError(f"hidden size {hidden} is not divisible by {heads} heads; each head "
                            "needs hidden / heads dimensions.")
    if heads % devices:
        raise ShardingError(f"{heads} heads do not split over {devices} devices: each device "
                            f"computes whole heads. Use a device count that divides {heads}.")
    if ffn % devices:
        raise ShardingError(f"the feed-forward width {ffn} is not divisible by {devices} devices; "
                            "A is split by columns and B by rows over the devices.")
    size = layout.dtype_size(dtype)
    mesh = {AXIS: devices}
    weights = {k: (s, layout.shard_shape(s, BLOCK_SPECS[k], mesh))
               for k, s in _shapes(hidden, ffn).items()}
    total = sum(math.prod(s) for s, _ in weights.values()) * size
    per = sum(math.prod(s) for _, s in weights.values()) * size
    return Plan(tokens, hidden, ffn, heads, devices, str(layout.dtype_of(dtype)), weights, total,
                per, tokens * hidden * size)


# --- run --------------------------------------------------------------------------------------

def init(hidden: int, ffn: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Full (unsharded) float32 weights of a block."""
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
            for k, s in _shapes(hidden, ffn).items()}


def _mse(y, target):
    return jnp.mean((y - target) ** 2)


def model(kind: str, head_dim: int = 0):
    """``model(x, params, axis)`` for ``kind`` "mlp" or "block"."""
    if kind == "mlp":
        return lambda x, p, axis=None: mlp(x, p["a"], p["b"], axis)
    if kind == "block":
        return lambda x, p, axis=None: block(x, p, head_dim, axis)
    raise ShardingError(f"unknown kind {kind!r}; use 'mlp' or 'block'.")


def specs(kind: str) -> dict:
    return MLP_SPECS if kind == "mlp" else BLOCK_SPECS


def forward(kind: str, mesh, head_dim: int = 0, axis: str = AXIS):
    """The sharded forward pass: ``fn(x, params) -> y`` (x and y replicated)."""
    fn = model(kind, head_dim)
    return jax.shard_map(lambda x, p: fn(x, p, axis), mesh=mesh,
                         in_specs=(P(), specs(kind)), out_specs=P(), check_vma=False)


def train_step(kind: str, mesh, head_dim: int = 0, axis: str = AXIS):
    """Loss and gradients (w.r.t. x and every weight) computed *inside* shard_map on each device,
    as Megatron-LM does: only f and g make them equal to the single-device gradients."""
    fn = model(kind, head_dim)

    def per_device(x, target, params):
        return jax.value_and_grad(lambda x, p: _mse(fn(x, p, axis), target), argnums=(0, 1))(
            x, params)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(), specs(kind)),
                         out_specs=(P(), (P(), specs(kind))), check_vma=False)


def gspmd_train_step(kind: str, mesh, head_dim: int = 0, axis: str = AXIS):
    """The single-device training step given to the compiler with the weights' shardings."""
    fn = model(kind, head_dim)
    weights = {k: NamedSharding(mesh, s) for k, s in specs(kind).items()}
    replicated = NamedSharding(mesh, P())
    step = jax.value_and_grad(lambda x, t, p: _mse(fn(x, p), t), argnums=(0, 2))
    return jax.jit(step, in_shardings=(replicated, replicated, weights))


def reference_step(kind: str, x, target, params, head_dim: int = 0):
    """Loss and gradients on one device (float64 inputs give a float64 reference)."""
    fn = model(kind, head_dim)
    return jax.value_and_grad(lambda x, p: _mse(fn(x, p), target), argnums=(0, 1))(x, params)


@dataclass(frozen=True)
class Check:
    forward: hlo.Collectives  # of the sharded forward pass
    train: hlo.Collectives  # of the sharded training step
    gspmd: hlo.Collectives  # of the same step left to the compiler (GSPMD)
    max_error: float  # largest relative error of the outputs, loss and gradients (all programs)
    weight_bytes_per_device: int  # measured from the array shards


def check(kind: str, mesh, x, target, params, head_dim: int = 0, axis: str = AXIS) -> Check:
    """Run the sharded forward and training step; compare with one device and with the plan.

    Raises:
        AssertionError: a value differs from the single-device model, or the compiled programs
            hold other all-reduces than the plan's (kind="mlp": 1 forward, 2 per step;
            "block": 2 and 4; each of tokens x hidden elements).
    """
    n = mesh.shape[axis]
    placed = {k: jax.device_put(v, NamedSharding(mesh, specs(kind)[k])) for k, v in params.items()}
    fwd = hlo.compile(forward(kind, mesh, head_dim, axis), x, placed)
    step = hlo.compile(train_step(kind, mesh, head_dim, axis), x, target, placed)
    ref_y = jax.jit(model(kind, head_dim))(x, params)
    ref_loss, ref_grads = jax.jit(reference_step, static_argnums=(0, 4))(kind, x, target, params,
                                                                         head_dim)
    got = (fwd(x, placed), *step(x, target, placed))
    errors = [relative_error(a, b) for a, b in zip(jax.tree.leaves(got),
                                              jax.tree.leaves((ref_y, ref_loss, ref_grads)),
                                              strict=True)]
    assert max(errors) < 1e-4, f"sharded values differ from one device (relative {max(errors)})"
    per_device = sum(a.addressable_shards[0].data.nbytes for a in placed.values())
    total = sum(v.nbytes for v in params.values())
    assert per_device * n == total, f"{per_device} bytes per device is not 1/{n} of {total}"
    found_f, found_t = hlo.parse(fwd.as_text()), hlo.parse(step.as_text())
    blocks = 1 if kind == "mlp" else 2
    element = math.prod(x.shape) * np.dtype(x.dtype).itemsize
    for found, count in ((found_f, blocks), (found_t, 2 * blocks)):
        got = [(c.kind, c.bytes, c.group_size) for c in found]
        assert got == [("all-reduce", element, n)] * count, (
            f"expected {count} all-reduces of {element} bytes over {n} devices, found {got}")
    compiler = hlo.compile(gspmd_train_step(kind, mesh, head_dim, axis), x, target, placed)
    errors += [relative_error(a, b) for a, b in zip(jax.tree.leaves(compiler(x, target, placed)),
                                               jax.tree.leaves((ref_loss, ref_grads)),
                                               strict=True)]
    assert max(errors) < 1e-4, f"the compiler's version differs from one device ({max(errors)})"
    return Check(found_f, found_t, hlo.parse(compiler.as_text()), max(errors), per_device)


def relative_error(a, b) -> float:
    """Largest absolute difference, relative to the reference's largest value (at least 1)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))
