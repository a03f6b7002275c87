"""A small GPT trained on a (data, pipeline, tensor) mesh in ONE compiled program.

Each device runs the same code (``jax.shard_map``) on its slice:

- **tensor**: every block is Megatron's (:func:`tpviz.megatron.run.block`): Q, K, V and the
  MLP's first matrix split by columns, W_O and the second matrix by rows, f and g around them;
- **pipeline**: the blocks are stacked ``[p, L/p, ...]`` and split along the first axis; the
  forward pass runs ``m + p - 1`` ticks of GPipe's order (:func:`ticks`, read from
  :func:`tpviz.pipeline.schedule`): at tick k stage s works on microbatch k - s and hands its
  output to stage s + 1 with ``jax.lax.ppermute``; the backward pass is the transpose of that
  loop, in reverse (autodiff turns each ppermute into one that sends the gradient back);
- **data**: each data shard has its own microbatches; the gradients are summed with
  ``jax.lax.psum`` over the data axis after the flush.

The embedding (first stage) and the output layer (last stage) are replicated: the stages that do
not use them contribute zero gradients, summed over the pipeline axis. ``remat=True`` wraps each
block in ``jax.checkpoint``: its activations are recomputed in the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpviz.megatron.run import block, layer_norm
from tpviz.pipeline import schedule

AXES = ("data", "pipeline", "tensor")  # outermost to innermost, as PTD-P places them
BLOCK = ("wq", "wk", "wv", "wo", "w1", "w2")


@dataclass(frozen=True)
class Config:
    """Sizes of the small GPT: L layers of width H (F = 4H), heads, vocabulary V, sequence S,
    batch B sequences, m microbatches per data shard."""

    layers: int = 4
    hidden: int = 16
    heads: int = 4
    vocab: int = 32
    seq: int = 8
    batch: int = 8
    microbatches: int = 2

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def init(cfg: Config, stages: int = 1, seed: int = 0) -> dict:
    """Full float32 weights; the block weights stacked ``[stages, L/stages, ...]``."""
    rng = np.random.default_rng(seed)
    h, f, per = cfg.hidden, 4 * cfg.hidden, cfg.layers // stages
    shapes = {"wq": (h, h), "wk": (h, h), "wv": (h, h), "wo": (h, h), "w1": (h, f), "w2": (f, h)}
    params = {k: (rng.standard_normal((stages, per, *s)) / np.sqrt(s[0])).astype(np.float32)
              for k, s in shapes.items()}
    params["embed"] = (rng.standard_normal((cfg.vocab, h)) * 0.5).astype(np.float32)
    params["pos"] = (rng.standard_normal((cfg.seq, h)) * 0.1).astype(np.float32)
    params["out"] = (rng.standard_normal((h, cfg.vocab)) / np.sqrt(h)).astype(np.float32)
    return params


def specs() -> dict[str, P]:
    """Block weights: stage axis over "pipeline", Megatron's split over "tensor"; the rest
    replicated."""
    column, row = P("pipeline", None, None, "tensor"), P("pipeline", None, "tensor", None)
    return {"wq": column, "wk": column, "wv": column, "wo": row, "w1": column, "w2": row,
            "embed": P(), "pos": P(), "out": P()}


def ticks(stages: int, microbatches: int) -> list[list[int | None]]:
    """``table[k][s]``: the microbatch stage s runs forward at tick k (None: idle), read from
    GPipe's schedule: each device's forward ops in order, one tick after its predecessor's."""
    sched = schedule("gpipe", stages, microbatches)
    table = [[None] * stages for _ in range(stages + microbatches - 1)]
    for s, ops in enumerate(sched.ops):
        for i, op in enumerate(o for o in ops if o.kind == "F"):
            table[s + i][s] = op.microbatch
    return table


def _stage(x, blocks, cfg: Config, axis, remat: bool, policy=None, unroll: bool = True):
    """The stage's L/p blocks on ``x[b, S, H]``, a ``jax.lax.scan`` over the stacked weights
    (each block under ``jax.checkpoint`` if ``remat``: the scan then saves only its inputs).
    ``unroll``: one copy of the block per layer in the program (its collectives and FLOPs are
    then counted once per layer); rolled, the loop's saved values are stacked per layer."""
    def one(x, w):
        return block(x, w, cfg.head_dim, axis), None

    if remat:
        one = jax.checkpoint(one, policy=policy)
    return jax.lax.scan(one, x, {k: blocks[k] for k in BLOCK}, unroll=unroll)[0]


def _loss(x, target, params):
    """Mean cross-entropy of the next tokens ``target[b, S]`` from ``x[b, S, H]``."""
    logits = layer_norm(x) @ params["out"]  # [b, S, V]
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, target[..., None], axis=-1).mean()


def reference_loss(params, tokens, targets, cfg: Config, remat: bool = False, policy=None,
                   unroll: bool = True):
    """The same model on one device (stacked weights of any stage count, run in order)."""
    x = params["embed"][tokens] + params["pos"]  # [B, S, H]
    flat = {k: params[k].reshape(-1, *params[k].shape[2:]) for k in BLOCK}
    return _loss(_stage(x, flat, cfg, None, remat, policy, unroll), targets, params)


def train_step(mesh, cfg: Config, remat: bool = False, policy=None):
    """``step(params, tokens, targets) -> (loss, grads)`` on ``mesh`` (axes :data:`AXES`);
    ``tokens, targets: int[B, S]`` split over "data"; grads as the params are split."""
    p, m = mesh.shape["pipeline"], cfg.microbatches
    table = ticks(p, m)

    def per_device(params, tokens, targets):
        # tokens, targets: int[B/d, S]; block weights: [1, L/p, ...] split over "tensor"
        stage = jax.lax.axis_index("pipeline")
        blocks = {k: params[k][0] for k in BLOCK}  # [L/p, H, 3H/t] etc.

        def local_loss(params, blocks):
            b = tokens.shape[0] // m
            x0 = params["embed"][tokens.reshape(m, b, -1)] + params["pos"]  # [m, b, S, H]
            buf, loss = jnp.zeros_like(x0[0]), 0.0
            for k, row in enumerate(table):
                first = row[0] if row[0] is not None else 0
                x = jnp.where(stage == 0, x0[first], buf)  # [b, S, H]
                y = _stage(x, blocks, cfg, "tensor", remat, policy)
                if row[-1] is not None:  # the last stage finishes microbatch row[-1]
                    target = targets.reshape(m, b, -1)[row[-1]]
                    loss = loss + jnp.where(stage == p - 1, _loss(y, target, params), 0.0)
                if k < len(table) - 1:
                    buf = jax.lax.ppermute(y, "pipeline", [(i, i + 1) for i in range(p - 1)])
            return loss / (m * jax.lax.axis_size("data"))

        loss, (g_rest, g_blocks) = jax.value_and_grad(local_loss, argnums=(0, 1))(params, blocks)
        grads = {k: jax.lax.psum(v, ("data", "pipeline")) for k, v in g_rest.items()
                 if k not in BLOCK}
        grads |= {k: jax.lax.psum(v, "data")[None] for k, v in g_blocks.items()}
        return jax.lax.psum(loss, ("data", "pipeline")), grads

    data = P("data", None)
    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(specs(), data, data),
                                 out_specs=(P(), specs()), check_vma=False))


def place(mesh, params: dict, tokens, targets) -> tuple:
    """Weights, tokens and targets put on the mesh as :func:`train_step` expects."""
    put = lambda v, s: jax.device_put(v, NamedSharding(mesh, s))  # noqa: E731
    return ({k: put(v, specs()[k]) for k, v in params.items()}, put(tokens, P("data", None)),
            put(targets, P("data", None)))


def data(cfg: Config, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Random tokens ``int32[B, S]`` and their next tokens (a shifted sequence) as targets."""
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq + 1)).astype(np.int32)
    return seq[:, :-1], seq[:, 1:]
