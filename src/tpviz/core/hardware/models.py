"""Model specs: the decoder-only transformers the book prices, with exact parameter counts.

One layer: attention with H query heads and K key/value heads of width d (grouped-query attention
when K < H), an MLP of width F (gated, SwiGLU: three D×F matrices; plain: two), E experts of
which k run per token (a mixture of experts; E = 1 is dense), and two norms. Around the layers:
the token embedding (V×D), an output matrix (untied) or the same one (tied), learned positions
(GPT) or none (RoPE), and a final norm. Presets cite their configs.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpviz.core.kinds import Count, Index
from tpviz.errors import ArgumentError


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer.

    Attributes:
        name: e.g. ``"LLaMA-3 70B"``.
        layers: L.   hidden: D.   heads: H, query heads.
        seq: s, training sequence length.   vocab: V.   batch: global batch in sequences.
        ffn: F (default 4·D).   kv_heads: K (default H).   head_dim: d (default D/H).
        gated: SwiGLU MLP (3 matrices) instead of a plain one (2).
        tied: the output matrix is the embedding's.   bias: linear layers have biases.
        norm: ``"layer"`` (weight and bias) or ``"rms"`` (weight only).
        learned_positions: a learned s×D position table (GPT), none with RoPE.
        experts, top_k: E experts per MLP, k of them per token (a router D×E when E > 1).
        source: the ``references.bib`` key of the config.
    """

    name: str
    layers: Count
    hidden: Count
    heads: Count
    seq: Count = 2048
    vocab: Count = 51200
    batch: Count = 1536
    ffn: Index = 0
    kv_heads: Index = 0
    head_dim: Index = 0
    gated: bool = False
    tied: bool = True
    bias: bool = True
    norm: str = "layer"
    learned_positions: bool = True
    experts: Count = 1
    top_k: Count = 1
    source: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise ArgumentError(f"Model: name must be a non-empty string, got {self.name!r}.")
        if self.kv_heads and self.heads % self.kv_heads:
            raise ArgumentError(f"Model {self.name!r}: heads = {self.heads} is not a multiple of "
                                f"kv_heads = {self.kv_heads}; each key-value head serves a whole "
                                f"group of query heads.")
        if not self.head_dim and self.hidden % self.heads:
            raise ArgumentError(f"Model {self.name!r}: hidden = {self.hidden} does not divide "
                                f"into heads = {self.heads} (the head size is hidden / heads); "
                                f"give heads a divisor of {self.hidden}, or head_dim.")
        if self.top_k > self.experts:
            raise ArgumentError(f"Model {self.name!r}: top_k = {self.top_k} is more than its "
                                f"experts = {self.experts}.")

    @property
    def F(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def K(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def attention_params(self) -> int:
        """Q, K, V and output projections (and their biases) of one layer."""
        D, q, kv = self.hidden, self.heads * self.d, self.K * self.d
        return 2 * D * q + 2 * D * kv + (q + 2 * kv + D if self.bias else 0)

    @property
    def mlp_params(self) -> int:
        """One expert's MLP: 3·D·F gated or 2·D·F plain (and biases)."""
        D, F = self.hidden, self.F
        matrices = (3 if self.gated else 2) * D * F
        return matrices + (((2 if self.gated else 1) * F + D) if self.bias else 0)

    @property
    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layer" else self.hidden

    @property
    def layer_params(self) -> int:
        """Every parameter of one layer: attention, E expert MLPs, router, two norms."""
        router = self.hidden * self.experts if self.experts > 1 else 0
        return (self.attention_params + self.experts * self.mlp_params + router
                + 2 * self.norm_params)

    @property
    def layer_matmul_params(self) -> int:
        """Weights one token multiplies by in one layer: attention, k experts, the router."""
        router = self.hidden * self.experts if self.experts > 1 else 0
        return self.attention_params + self.top_k * self.mlp_params + router

    @property
    def embedding_params(self) -> int:
        """Token embedding, learned positions, and the output matrix if untied."""
        out = 0 if self.tied else self.vocab * self.hidden
        pos = self.seq * self.hidden if self.learned_positions else 0
        return self.vocab * self.hidden + pos + out

    @property
    def params(self) -> int:
        """Ψ: every parameter (all experts), exact."""
        return self.layers * self.layer_params + self.embedding_params + self.norm_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses (k of E experts)."""
        return self.params - self.layers * (self.experts - self.top_k) * self.mlp_params

    def flops_per_token(self, training: bool = True, convention: str = "full") -> float:
        """FLOPs per token (2 per multiply-add; a training step is 3× the forward pass), in one
        of three conventions, which differ more as the sequence grows against the width:

        - ``"full"`` (default): the matmuls, 2·(L·layer_matmul_params + V·D), and attention's
          QKᵀ and AV over the whole sequence, 4·s·H·d·L, every score counted, as PTD-P's eq. 3
          (narayanan2021megatron) and the Scaling Book's 12·B·T²·N·H for training do;
        - ``"causal"``: the same with the attention term halved, the scores a causal kernel
          (FlashAttention) computes;
        - ``"6N"``: 6 × :attr:`active_params` (2 × forward), no attention: the rule of thumb
          ("6 · num_params · num_tokens", austin2025scaling; Kaplan et al.'s 6N).

        Training, LLaMA-3 70B at s = 8,192: "6N" 423 GFLOPs, "causal" 449, "full" 481 (+14 %);
        GPT-3 175B at s = 2,048: 1,048, 1,062, 1,077 (+3 %).
        """
        from tpviz.core import validate

        convention = validate.choice("convention", convention, ("full", "causal", "6N"))
        if convention == "6N":
            forward = 2 * self.active_params
        else:
            attention = 4 * self.seq * self.heads * self.d * self.layers
            forward = (2 * (self.layers * self.layer_matmul_params + self.vocab * self.hidden)
                       + (attention / 2 if convention == "causal" else attention))
        return 3 * forward if training else forward

    def flops(self, batch: int | None = None, convention: str = "full") -> float:
        """Model FLOPs of one training step of ``batch`` sequences (default: ``self.batch``),
        in the ``convention`` of :meth:`flops_per_token`."""
        return (batch or self.batch) * self.seq * self.flops_per_token(True, convention)


def _llama(name, layers, hidden, ffn, heads, vocab, seq, source, **kw) -> Model:
    return Model(name, layers, hidden, heads, seq=seq, vocab=vocab, ffn=ffn, kv_heads=8,
                 gated=True, tied=False, bias=False, norm="rms", learned_positions=False,
                 source=source, **kw)


MODELS = {m.name: m for m in (
    # GPT-3 175B: L 96, D 12288, 96 heads, F = 4D, context 2048, batch 1536 (brown2020gpt3,
    # Table 2.1); GPT-2's 50,257 tokens padded to 51,200 as Megatron does (narayanan2021megatron);
    # tied, learned positions, biases
    Model("GPT-3 175B", 96, 12288, 96, seq=2048, vocab=51200, batch=1536, source="brown2020gpt3"),
    # LLaMA-2 70B: L 80, D 8192, F 28672, 64 heads, 8 KV heads, V 32000, s 4096 (touvron2023llama2)
    _llama("LLaMA-2 70B", 80, 8192, 28672, 64, 32000, 4096, "touvron2023llama2", batch=1024),
    # LLaMA-3: V 128256, 8 KV heads, s 8192; 8B L 32 D 4096 F 14336 H 32; 70B L 80 D 8192
    # F 28672 H 64; 405B L 126 D 16384 F 53248 H 128 (grattafiori2024llama3, Table 3)
    _llama("LLaMA-3 8B", 32, 4096, 14336, 32, 128256, 8192, "grattafiori2024llama3", batch=512),
    _llama("LLaMA-3 70B", 80, 8192, 28672, 64, 128256, 8192, "grattafiori2024llama3",
           batch=2048),
    _llama("LLaMA-3 405B", 126, 16384, 53248, 128, 128256, 8192, "grattafiori2024llama3",
           batch=2048),
    # Mixtral 8x7B: Mistral 7B's shapes (L 32, D 4096, F 14336, 32/8 heads, V 32000) with 8
    # experts, 2 per token, s 32768 (jiang2024mixtral)
    _llama("Mixtral 8x7B", 32, 4096, 14336, 32, 32000, 32768, "jiang2024mixtral", batch=128,
           experts=8, top_k=2),
)}
