"""Chapter 2's build checkers on the harness: a collective priced on a torus (2.6, the slice's
own price out of reach) and an all-gather both ways round a ring (2.7). Expected values are
worked by hand from the published constants (austin2025scaling), not read from core.hardware."""

import jax
import jax.numpy as jnp
import pytest
from checking import fails, passes, stub

import tpviz
from tpviz import collectives
from tpviz import exercises as ex
from tpviz.core import hardware as hw


def _s(n, wrap):  # S(n) of a ring, or the middle link's load factor of a line
    if wrap:
        return n * n / 8 if n % 2 == 0 else (n * n - 1) / 8
    return (n // 2) * (n - n // 2)


def right_price(kind, v, sizes, wraps, link, hop, *, doubled=True, one_way=False,
                switch=False, first_axis_only=False, all_wrap=False, once=False):
    if first_axis_only:
        sizes, wraps = sizes[:1], wraps[:1]
    if all_wrap:
        wraps = tuple(True for _ in wraps)
    n = 1
    for k in sizes:
        n *= k
    hops = sum(k - 1 if (one_way or not w) else k // 2 for k, w in zip(sizes, wraps, strict=True))
    if kind == "all-to-all":
        if switch:
            return hops * hop, (n - 1) / n / n * v / link
        return hops * hop, sum(v / n * _s(k, w) / k for k, w in zip(sizes, wraps, strict=True)) / link
    bw = sum((2 if w and doubled else 1) * link for w in wraps)
    twice = 2 if kind == "all-reduce" and not once else 1
    return twice * hops * hop, twice * (n - 1) / n * v / bw


def _from_the_slice(kind, v, sizes, wraps, link, hop):  # the library's own price
    from dataclasses import replace

    system = replace(hw.TPUS["TPU v5e"], link=link, hop_latency=hop)
    p = hw.TpuSlice(system, sizes, wraps).price(kind, v)
    return p.latency_s, p.bandwidth_s


def test_torus_price_passes_the_right_model(capsys):
    passes(ex.check_torus_price, right_price, capsys=capsys)
    stub(ex.check_torus_price, ..., capsys=capsys)


@pytest.mark.parametrize(("wrong", "words"), [
    (_from_the_slice, r"write what `tpviz\.core\.hardware\.TpuSlice\.price` does"),
    (lambda *a: right_price(*a, first_axis_only=True), "term"),  # one axis only: size-specific
    (lambda *a: right_price(*a, all_wrap=True), "term"),  # the wraparound ignored
    (lambda *a: right_price(*a, once=True), "term"),  # an all-reduce priced as one gather
    (lambda *a: right_price(*a, doubled=False), "bandwidth"),  # one direction of each ring
    (lambda *a: right_price(*a, one_way=True), "latency"),  # hops counted one way round
    (lambda *a: right_price(*a, switch=True), "all-to-all"),  # a switch's all-to-all
    (lambda *a: 1.0, "pair"),
])
def test_torus_price_rejects_wrong_models(wrong, words):
    fails(ex.check_torus_price, wrong, words=words)


def test_torus_price_is_computed_after_the_learners_call():
    """Review (issue 39): the expected price was on the checker's stack while the learner's
    function ran, and a function that read it from the calling frames passed."""
    import sys

    def peek(kind, v, sizes, wraps, link, hop):
        frame = sys._getframe(1)
        while frame is not None:
            for value in frame.f_locals.values():
                if hasattr(value, "latency_s") and hasattr(value, "bandwidth_s"):
                    return value.latency_s, value.bandwidth_s
            frame = frame.f_back
        return 0.0, 0.0

    fails(ex.check_torus_price, peek, words="the latency term")


# --- 2.7 an all-gather both ways round a ring -----------------------------------------------

def _both_ways(block, axes, devices=None, both=True, every_round=False):
    """The book's gather; ``devices`` fixes the ring's size; ``both=False`` goes one way;
    ``every_round`` sends both ways in every one of n - 1 rounds."""
    k = devices or jax.lax.axis_size(axes)
    me = jax.lax.axis_index(axes)
    out = jnp.zeros((k, *block.shape), block.dtype).at[me].set(block)
    right = [(i, (i + 1) % k) for i in range(k)]
    left = [(i, (i - 1) % k) for i in range(k)]
    from_left = from_right = block
    for s in range(1, (k if every_round or not both else k // 2 + 1)):
        from_left = jax.lax.ppermute(from_left, axes, right)  # the block of device me - s
        out = out.at[(me - s) % k].set(from_left)
        if both and (every_round or s < k - s):
            from_right = jax.lax.ppermute(from_right, axes, left)  # the block of device me + s
            out = out.at[(me + s) % k].set(from_right)
    return out.reshape(-1, block.shape[1])


def _through_psum(block, axes):  # every block placed in zeros and all-reduced
    k, me = jax.lax.axis_size(axes), jax.lax.axis_index(axes)
    whole = jnp.zeros((k * block.shape[0], block.shape[1]), block.dtype)
    return jax.lax.psum(jax.lax.dynamic_update_slice_in_dim(whole, block, me * block.shape[0],
                                                            0), axes)


def test_fast_gather_solution_passes_and_is_priced(capsys):
    ex.check_fast_gather(_both_ways)
    out = capsys.readouterr().out
    assert "✓" in out and "4 sends clockwise and 3 counter-clockwise" in out
    # 4 rounds of 1 µs + 512 B / 4.5e10 B/s = 1.0114 µs each
    assert "4.05 µs against 7.08 µs one way round" in out


@pytest.mark.parametrize(("wrong", "words"), [
    (lambda b, a: jax.lax.all_gather(b, a, tiled=True), "all-gather .* does not need"),
    (lambda b, a: _both_ways(b, a, devices=8), "right on 8 devices .* but on 4 devices"),
    (lambda b, a: _both_ways(b, a, both=False), "7 of them go the same way round"),
    (lambda b, a: _both_ways(b, a, every_round=True), "14 collective-permutes where"),
    (_through_psum, "all-reduce .* does not need"),
    (lambda b, a: _both_ways(b, a)[::-1], "wrong values"),
])
def test_fast_gather_rejects_wrong_programs(wrong, words):
    fails(ex.check_fast_gather, wrong, words=words)


def _from_device_0(block, axes):  # forgets `me`: every position counted from device 0
    k = jax.lax.axis_size(axes)
    out = jnp.zeros((k, *block.shape), block.dtype).at[0].set(block)
    from_left = from_right = block
    for s in range(1, k // 2 + 1):
        from_left = jax.lax.ppermute(from_left, axes, [(i, (i + 1) % k) for i in range(k)])
        out = out.at[(-s) % k].set(from_left)
        if s < k - s:
            from_right = jax.lax.ppermute(from_right, axes, [(i, (i - 1) % k) for i in range(k)])
            out = out.at[s].set(from_right)
    return out.reshape(-1, block.shape[1])


def _library_ring(block, axes):  # chapter 1's ring all-gather plan, followed (one way round)
    n = jax.lax.axis_size(axes)
    flat = block.reshape(-1)
    plan = collectives.plan("ring", "all-gather", n, 4 * flat.size * n)
    return collectives.follow(plan, axes)(flat).reshape(n * block.shape[0], block.shape[1])


def test_fast_gather_refuses_the_librarys_ring():
    """Issue 39, mutation pass: the tpviz-library shortcut for 2.7 (gap 8)."""
    fails(ex.check_fast_gather, _library_ring, words=r"write what `tpviz\.collectives\.")


def test_fast_gather_rejects_the_chapters_axis_name_written_in():
    """Review (issue 39): the check's ring axis was "x", the chapter's own mesh axis, so a gather
    with "x" written in for ``axes`` passed."""
    fails(ex.check_fast_gather, lambda b, a: _both_ways(b, "x"), words="unbound axis name: x")


def test_fast_gather_reads_every_devices_copy():
    """Review (issue 39): the result is whole on every device (out_specs=P() without check_vma),
    and the check read device 0's copy only: a gather that forgets the device's own index is
    right there, and passed."""
    fails(ex.check_fast_gather, _from_device_0,
          words="device 1 ends with wrong values for the result")


def test_tpviz_imports():  # the chapter's checker names stay where the notebooks find them
    assert tpviz.machines.exercises.check_fast_gather is ex.check_fast_gather
