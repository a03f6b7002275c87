"""A paged KV cache (vLLM's PagedAttention, kwon2023efficient): the cache in fixed blocks of
tokens, a block table per request, and what it saves against reserving each request's longest
possible context.

A **contiguous** cache gives every request one slab of ``max_tokens`` positions when it starts,
because its final length is not known: the positions it never fills are wasted. A **paged**
cache hands out blocks of ``block`` tokens as the request grows; only the last block of each
request is partly empty, ``block - 1`` positions at most. :class:`BlockTable` is the allocator
(a free list and a table of block numbers per request); :func:`simulate` runs it over a set of
request lengths; :func:`paged_attention` reads a request's keys and values through its table
(a gather), which must equal attention over the contiguous cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax.numpy as jnp

from tpviz.core import validate
from tpviz.core.kinds import ArrayOf, Index, Of, Sizes
from tpviz.errors import ArgumentError
from tpviz.inference.model import attend


@dataclass
class BlockTable:
    """Blocks of ``block`` tokens out of a pool of ``blocks``; ``tables[r]`` lists request r's
    block numbers in order, ``lengths[r]`` its tokens."""

    blocks: int
    block: int = 16
    free: list = field(default_factory=list)
    tables: dict = field(default_factory=dict)
    lengths: dict = field(default_factory=dict)

    def __post_init__(self):
        self.blocks = validate.integer("blocks", self.blocks, maximum=10**8)
        self.block = validate.integer("block", self.block, maximum=10**6)
        self.free = list(range(self.blocks))[::-1]  # pop() hands out 0, 1, 2, …

    def append(self, request: Of(Index, str), tokens: int = 1) -> None:
        """Add ``tokens`` tokens to ``request`` (a new one starts empty), taking a new block
        whenever its last one is full.

        Raises:
            ArgumentError: the pool has no free block left.
        """
        tokens = validate.integer("tokens", tokens, maximum=10**9)
        table = self.tables.setdefault(request, [])
        have = self.lengths.get(request, 0) + tokens
        while len(table) * self.block < have:
            if not self.free:
                raise ArgumentError(f"the pool's {self.blocks} blocks are all taken; free a "
                                    "request or use more blocks.")
            table.append(self.free.pop())
        self.lengths[request] = have

    def release(self, request: Of(Index, str)) -> None:
        """Give a finished request's blocks back."""
        if request not in self.tables:
            raise ArgumentError(f"request {request!r} holds no blocks (its requests: "
                                f"{list(self.tables)[:8]}).")
        self.free.extend(reversed(self.tables.pop(request)))
        self.lengths.pop(request, None)

    @property
    def used(self) -> int:
        """Blocks handed out."""
        return self.blocks - len(self.free)


@dataclass(frozen=True)
class Paging:
    """Token slots reserved by each cache for the same requests, and the tokens stored."""

    tokens: int  # tokens the requests hold
    contiguous: int  # slots reserved: max_tokens per request
    paged: int  # slots in the blocks handed out

    @property
    def contiguous_waste(self) -> float:
        return 1 - self.tokens / self.contiguous

    @property
    def paged_waste(self) -> float:
        return 1 - self.tokens / self.paged

    @property
    def saving(self) -> float:
        """How many times more requests fit in the same memory, paged."""
        return self.contiguous / self.paged


def simulate(lengths: Sizes(), max_tokens: int, block: int = 16) -> Paging:
    """Grow the requests side by side to their lengths (prompt and output), ``block`` tokens
    per round, in a :class:`BlockTable`, and count the slots against a contiguous cache of
    ``max_tokens`` per request."""
    block = validate.integer("block", block, maximum=10**6)
    if isinstance(lengths, str) or not hasattr(lengths, "__len__") or not len(lengths):
        raise ArgumentError(f"lengths = {lengths!r}: give the requests' lengths in tokens, a "
                            "non-empty list such as [120, 2048, 37].")
    lengths = [validate.integer("lengths", n, maximum=10**8) for n in lengths]
    max_tokens = validate.integer("max_tokens", max_tokens, maximum=10**8)
    if max(lengths) > max_tokens:
        raise ArgumentError(f"a request of {max(lengths)} tokens is longer than max_tokens = "
                            f"{max_tokens}.")
    table = BlockTable(sum(-(-n // block) for n in lengths), block)
    for start in range(0, max(lengths), block):  # the requests grow together, interleaved
        for r, n in enumerate(lengths):
            if start < n:
                table.append(r, min(block, n - start))
    return Paging(sum(lengths), len(lengths) * max_tokens, table.used * block)


def paged_attention(q: ArrayOf("1 N D"), k_pool: ArrayOf("P B M D"), v_pool: ArrayOf("P B M D"),
                    table: ArrayOf("T", integer=True, loose=True), length: int):
    """Attention of one request's new token over its cache read through its block table.

    ``q[1, n_h, d_h]``; ``k_pool, v_pool[blocks, block, n_kv, d_h]`` every request's blocks;
    ``table[n]`` the request's block numbers; ``length`` its tokens. Returns ``o[1, n_h, d_h]``."""
    k = k_pool[jnp.asarray(table)].reshape(1, -1, *k_pool.shape[2:])  # [1, n·block, n_kv, d_h]
    v = v_pool[jnp.asarray(table)].reshape(1, -1, *v_pool.shape[2:])
    return attend(q, k, v, jnp.arange(k.shape[1]) < length)[0]
