"""Known mistakes of the chapter's two build exercises, named from the values a wrong program
returns (the ``diagnose`` hooks of :mod:`tpviz.inference.builds`).

Each hook recomputes, on the host, what a learner's program gives with one plausible mistake,
and names that mistake when the program's result matches it. It says what is wrong, never the
code that is right; a result that matches none leaves the harness's "wrong values" message.

- **14.5** (a decode step split by key/value heads): the caches returned without this step's
  keys and values, or with them at another position; the first step's output left as each
  device's partial sum, N times too large or 1/N of it; the new token's own position left out of
  the attention; the cache read before this step's write; query heads matched with the wrong
  key/value heads; the scores not divided by √d_h; the new keys written on some devices only.
- **14.6** (the cross-device log-sum-exp combine): device 0's own part; the parts averaged with
  equal weights; weights that do not add up to 1; the part with the largest lse alone; each
  device's weighted share, never summed.
"""

from __future__ import annotations

import numpy as np

from tpviz.inference.model import attend


def _close(got, want) -> bool:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return got.shape == want.shape and bool(np.all(np.isfinite(got))) and np.allclose(
        got, want, rtol=1e-4, atol=1e-4)


def _softmax_attention(q, k, v, kv_of, valid, scale: bool):
    """``q[B, n, d]`` over ``k, v[B, S, m, d]``, query head j using key/value head
    ``kv_of[j]``; ``valid[S]``. Float64 on the host."""
    kk, vv = k[:, :, kv_of], v[:, :, kv_of]  # [B, S, n, d]
    s = np.einsum("bnd,bsnd->bns", q, kk) / (np.sqrt(q.shape[-1]) if scale else 1.0)
    s = np.where(valid[None, None, :], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bns,bsnd->bnd", p / p.sum(axis=-1, keepdims=True), vv)


def first_step(args, start: int, devices: int, *, strict=False, stale=False, tile=False,
               scale=True, own=False):
    """The first step's ``out[B, H]`` of 14.5, with the mistakes the flags name: ``strict``
    (positions < pos only), ``stale`` (the cache before this step's write), ``tile`` (query
    head j on device i uses its key/value head ``j mod (n_kv/N)``), ``scale`` off, ``own``
    (device 0's partial sum only)."""
    xs, wq, wk, wv, wo, k, v = (np.asarray(a, np.float64) for a in args)
    x, b, d = xs[0], xs.shape[1], k.shape[-1]
    n, m = wq.shape[1] // d, k.shape[2]
    k, v = k.copy(), v.copy()
    if not stale:
        k[:, start] = (x @ wk).reshape(b, m, d)
        v[:, start] = (x @ wv).reshape(b, m, d)
    heads, local = n // devices, m // devices
    j = np.arange(n)
    kv_of = (j // heads) * local + (j % heads) % local if tile else j // (n // m)
    valid = np.arange(k.shape[1]) < start if strict else np.arange(k.shape[1]) <= start
    o = _softmax_attention((x @ wq).reshape(b, n, d), k, v, kv_of, valid, scale)
    if own:
        return o[:, :heads].reshape(b, -1) @ wo[:heads * d]
    return o.reshape(b, -1) @ wo


def decode_mistake(case, out, want) -> str | None:
    """The mistake of a 14.5 program whose ``out = (outs[T, B, H], k, v)`` differs from
    ``want``, if it is one this module knows."""
    got = [np.asarray(a) for a in out] if isinstance(out, tuple | list) else []
    if len(got) != 3 or all(_close(g, w) for g, w in zip(got, want, strict=True)):
        return None
    start, steps, n = case.sizes["start"], case.sizes["T"], case.n
    if got[1].ndim == 4:
        written = set(np.flatnonzero(np.abs(got[1]).sum(axis=(0, 2, 3))).tolist())
        reached, new = set(range(start + steps)), set(range(start, start + steps))
        if written - reached:
            return (f"the caches you return hold keys at position(s) "
                    f"{sorted(written - reached)}, which no token has reached: each step's "
                    "keys and values belong at its own position, pos.")
        if new <= reached - written:
            return ("the key and value caches you return hold none of the new tokens' keys and "
                    "values: each step must return its caches with its token written in.")
        if reached - written:
            return (f"the caches you return hold no keys at position(s) "
                    f"{sorted(reached - written)}, which tokens have reached: each step's "
                    "keys and values belong at its own position, pos.")
        heads = np.abs(got[1][:, start:start + steps]).sum(axis=(0, 3)).min(axis=0) > 0
        if 0 < heads.sum() < heads.size:  # some devices wrote their heads, others did not
            return (f"the caches you return hold the new tokens' keys and values for key/value "
                    f"head(s) {np.flatnonzero(heads).tolist()} only, not for "
                    f"{np.flatnonzero(~heads).tolist()}: every device writes its own heads' "
                    "keys and values into its own cache.")
    first = got[0][0] if got[0].ndim == 3 else None
    if first is None or not np.all(np.isfinite(first)):
        return None
    right = first_step(case.args, start, n)
    said = {"own": "each device's output is its own heads' part only, a partial sum: the "
                   "devices' parts were never added together.",
            "strict": "the attention leaves out position pos: the new token attends to its "
                      "own key and value too.",
            "stale": "the attention reads the cache as it was before this step's keys and "
                     "values were written at pos.",
            "tile": "query heads are matched with the wrong key/value heads: see which query "
                    "heads share a key/value head, in the exercise.",
            "scale": "the scores are not divided by √d_h."}
    grouped = case.sizes["kv"] // n > 1 and case.sizes["heads"] // case.sizes["kv"] > 1
    for name, text in said.items():
        flags = {"scale": False} if name == "scale" else {name: True}
        if name == "tile" and not grouped:  # tiling and repeating the heads agree
            continue
        if _close(first, first_step(case.args, start, n, **flags)):
            return text
    scale = float(np.vdot(first, right) / np.vdot(right, right))
    if not np.isclose(scale, 1, rtol=1e-3) and _close(first, scale * right):
        if np.isclose(scale, n, rtol=1e-3):
            return (f"the output is N = {n} times too large: something already whole on every "
                    "device was summed over the devices.")
        if np.isclose(scale, 1 / n, rtol=1e-3):
            return ("the output is 1/N of the right one: the devices' parts were averaged, not "
                    "added.")
        return (f"the output is {scale:.3g} times the right one on {n} devices: does your code "
                "assume a number of devices?")
    return None


def combine_mistake(case, out, want) -> str | None:
    """The mistake of a 14.6 combine whose output differs from ``want``, if known."""
    got = np.asarray(out)
    if _close(got, want) or not np.all(np.isfinite(got)):
        return None
    q, k, v, valid = (np.asarray(a) for a in case.args)
    split = [attend(q, k[:, rows], v[:, rows], valid[:, rows])  # what each device's combine got
             for rows in np.split(np.arange(k.shape[1]), case.n)]
    parts = np.stack([np.asarray(o, np.float64) for o, _ in split])  # [N, B, n_h, d_h]
    lses = np.stack([np.asarray(lse, np.float64) for _, lse in split])  # [N, B, n_h]
    weights = np.exp(lses - lses.max(axis=0))[..., None]
    largest = np.take_along_axis(parts, lses.argmax(axis=0)[None, ..., None], axis=0)[0]
    known = ((parts[0], "your result is this device's own part, not combined with the other "
                       "devices' parts."),
             (parts.mean(axis=0), "the parts are averaged with equal weights: a part whose "
                                  "scores are larger (a larger lse_i) must count for more."),
             ((weights * parts).sum(axis=0), "the parts' weights do not add up to 1."),
             (largest, "only the part with the largest lse_i is kept: every part contributes."),
             (weights[0] * parts[0] / weights.sum(axis=0),
              "your result is this device's share of the whole, its weighted part over the "
              "sum of the weights: the weighted parts were never added together."))
    for value, text in known:
        if _close(got, value):
            return text
    return None
