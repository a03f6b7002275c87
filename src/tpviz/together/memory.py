"""Activation memory of one transformer layer (Korthikanti et al. 2023), op by op.

Notation: s sequence, b microbatch, h hidden size, a heads, t tensor-parallel size; activations
in 16-bit (2 bytes), dropout masks 1 byte per element, the FFN 4h wide. What one layer keeps for
its backward pass, in bytes:

Attention block, 11·sbh + 5·a·s²·b:
    - input of the fused Q, K, V projection (the layer-norm output) ......... 2sbh
    - Q and K, inputs of Q·Kᵀ ................................................ 4sbh
    - softmax output, needed by the softmax backward ......................... 2as²b
    - softmax dropout mask ................................................... as²b
    - attention over V: the dropped-out probabilities and V ............... 2as²b + 2sbh
    - input of the output projection ........................................ 2sbh
    - dropout mask after attention ........................................... sbh
MLP block, 19·sbh:
    - input of the first linear layer ........................................ 2sbh
    - input of GeLU (4h wide) ................................................ 8sbh
    - input of the second linear layer (GeLU output, 4h wide) ................ 8sbh
    - dropout mask ........................................................... sbh
Two layer norms, each keeping its input: 4sbh.

Total: sbh·(34 + 5·a·s/h). With tensor parallelism t, the attention and MLP internals split over
the t devices (24·sbh/t + 5as²b/t), while the layer-norm inputs, the inputs of the first
linear layers and the two dropout masks (10·sbh) stay whole on every device:
sbh·(10 + 24/t + 5as/(ht)). Sequence parallelism splits those 10·sbh along the sequence:
sbh·(34/t + 5as/(ht)). Selective recomputation recomputes the attention core (softmax, its
dropout, the product with V), dropping the 5as²b/t term. Full recomputation keeps only each
layer's input, 2sbh (2sbh/t when sequence parallelism shards it; the paper's Table 2 lists 2sbh).
"""

from __future__ import annotations

from tpviz.core import validate
from tpviz.core.kinds import Devices
from tpviz.errors import ArgumentError

RECOMPUTE = ("none", "selective", "full")

# the terms of the derivation, in units of s·b·h bytes (as2b: units of a·s²·b bytes)
TERMS = {
    "attention": {"qkv input": 2, "Q and K": 4, "V": 2, "output-projection input": 2,
                  "attention dropout mask": 1},
    "attention core (a·s²·b)": {"softmax output": 2, "softmax dropout mask": 1,
                                "dropped-out probabilities": 2},
    "mlp": {"first linear input": 2, "GeLU input": 8, "second linear input": 8,
            "MLP dropout mask": 1},
    "layer norms": {"two layer-norm inputs": 4},
}
# the sbh terms that stay whole on every tensor-parallel device (without sequence parallelism)
NOT_SPLIT = ("qkv input", "attention dropout mask", "first linear input", "MLP dropout mask",
             "two layer-norm inputs")


def activation_bytes(seq: int, batch: int, hidden: int, heads: int, tensor: Devices = 1,
                     sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Bytes of activations one transformer layer keeps per device for its backward pass.

    =========================================== ===========================================
    recompute / parallelism                      bytes per layer (Korthikanti et al., Table 2)
    =========================================== ===========================================
    "none", t = 1                                sbh·(34 + 5as/h)
    "none", tensor parallel t                    sbh·(10 + 24/t + 5as/(ht))
    "none", tensor + sequence parallel           sbh·(34/t + 5as/(ht))
    "selective", tensor parallel                 sbh·(10 + 24/t)
    "selective", tensor + sequence parallel      sbh·34/t
    "full"                                       2sbh (2sbh/t with sequence parallelism)
    =========================================== ===========================================

    Args:
        seq: s, tokens per sequence.
        batch: b, sequences per microbatch.
        hidden: h, the model width.
        heads: a, attention heads.
        tensor: t, tensor-parallel devices.
        sequence_parallel: shard the layer-norm and dropout regions along the sequence.
        recompute: "none", "selective" (the attention core) or "full" (the whole layer).
    """
    s, b, h, a = (validate.integer(n, v) for n, v in
                  (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads)))
    t = validate.integer("tensor", tensor)
    if h % a:
        raise ArgumentError(f"heads={a} must divide hidden={h} (each head is hidden / heads "
                            f"wide); use a divisor of {h}.")
    recompute = validate.choice("recompute", recompute, RECOMPUTE)
    sp = bool(validate.instance("sequence_parallel", sequence_parallel, bool, "True or False"))
    for name, n in (("hidden", h), ("heads", a), *((("seq", s),) if sp else ())):
        if n % t:
            raise ArgumentError(f"tensor={t} must divide {name}={n} (tensor parallelism splits "
                                f"it into t equal parts); use a t that divides it, e.g. "
                                f"{max(d for d in range(1, t + 1) if n % d == 0)}.")
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    split = sum(sum(v.values()) for k, v in TERMS.items() if "core" not in k)  # 34
    whole = sum(v for part in TERMS.values() for k, v in part.items() if k in NOT_SPLIT)  # 10
    linear = sbh * (split / t if sp else whole + (split - whole) / t)
    core = sum(TERMS["attention core (a·s²·b)"].values()) * a * s * s * b / t  # 5as²b/t
    return linear + (0 if recompute == "selective" else core)


# --- jax.checkpoint policies on chapter 11's GPT layer (one device, no dropout) -----------------

# policy name -> what the backward pass keeps of one layer, in values per token: the layer's
# input always (H); then, for JAX's policies (jax.checkpoint_policies), the outputs it may save
# that some backward rule needs. W2's output is saved by none: no rule needs it.
CHECKPOINT_POLICIES = {
    "full": "nothing_saveable: the layer input only",
    "big matmuls": "save_only_these_names('mlp_in'): the input and the MLP's first matmul "
                   "(F wide; 2F with a gated MLP): the Scaling Book's checkpoints after the big "
                   "matmuls, 2·L·B·(D + 2F) bytes in bf16 for a gated MLP",
    "dots, no batch dims": "dots_with_no_batch_dims_saveable: also Q, K, V and W_O's output "
                           "(every linear layer's output)",
    "dots": "dots_saveable: also the attention scores (n_h·S per token) and the attention "
            "output before W_O (einsums with batch dimensions)",
}


def policy_values(policy: str, hidden: int, heads: int, seq: int, ffn: int | None = None,
                  gated: bool = False) -> int:
    """Values per token one layer keeps for its backward pass under ``policy`` (a key of
    :data:`CHECKPOINT_POLICIES`), a model: H for "full"; H + F for "big matmuls"; 5H + F for
    "dots, no batch dims"; 6H + F + n_h·S for "dots" (F → 2F with a gated MLP, whose two
    F-wide matmuls are both kept). The compiled program keeps exactly these on one device
    (:func:`tpviz.together.check.measure_remat`)."""
    policy = validate.choice("policy", policy, CHECKPOINT_POLICIES)
    h, a, s = (validate.integer(n, v) for n, v in (("hidden", hidden), ("heads", heads),
                                                    ("seq", seq)))
    f = (2 if validate.flag("gated", gated) else 1) * validate.integer("ffn", ffn or 4 * h)
    return {"full": h, "big matmuls": h + f, "dots, no batch dims": 5 * h + f,
            "dots": 6 * h + f + a * s}[policy]


def policy_recompute_flops(policy: str, hidden: int, heads: int, seq: int,
                           ffn: int | None = None) -> int:
    """Matmul FLOPs per token one layer recomputes in the backward pass under ``policy`` (a
    model; element-wise work left out): "full" every forward matmul but W2's (whose output no
    rule needs), 8H² + 4SH + 2HF; "big matmuls" the attention's, 8H² + 4SH; "dots, no batch
    dims" the scores and their product with V, 4SH; "dots" none."""
    policy = validate.choice("policy", policy, CHECKPOINT_POLICIES)
    h, s = validate.integer("hidden", hidden), validate.integer("seq", seq)
    validate.integer("heads", heads)
    f = validate.integer("ffn", ffn or 4 * h)
    return {"full": 8 * h * h + 4 * s * h + 2 * h * f, "big matmuls": 8 * h * h + 4 * s * h,
            "dots, no batch dims": 4 * s * h, "dots": 0}[policy]

