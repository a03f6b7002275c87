"""Build exercises of chapter 3 on :mod:`tpviz.core.harness` that grade more than one product:
FSDP's layer in both directions (3.6), the forward product and the weight gradient."""

from __future__ import annotations

import numpy as np

from tpviz.core import harness
from tpviz.core.exercises import checker
from tpviz.core.unavailable import resolve


def _inner(name: str) -> str:
    """JAX's API functions share one wrapper's code (watching it would refuse every JAX call):
    watch the function inside it."""
    return f"{name}.__wrapped__" if hasattr(resolve(name), "__wrapped__") else name


# the book's programs, and JAX's automatic transposes: the gradient's collective is the exercise
DERIVED = ("tpviz.matmul.explicit", "tpviz.matmul.gspmd",
           *(_inner(f"jax.{n}") for n in ("vjp", "grad", "value_and_grad", "linear_transpose")))


def _inputs(s: dict, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (rng.standard_normal((s["B"], s["D"]), dtype=np.float32),
            rng.standard_normal((s["D"], s["F"]), dtype=np.float32),
            rng.standard_normal((s["B"], s["F"]), dtype=np.float32))


def _both(x, w, dout):
    """One device: Out = In · W1 and dW1 = Inᵀ · dOut."""
    x, w, dout = (np.asarray(a, np.float64) for a in (x, w, dout))
    return x @ w, x.T @ dout


def _diagnose(case, got, want) -> str | None:
    """A weight gradient N times too small: averaged over the devices, not summed."""
    if not isinstance(got, tuple | list) or len(got) != 2:
        return None
    dw = np.asarray(got[1])
    if dw.shape == want[1].shape and np.allclose(dw * case.n, want[1], rtol=1e-4, atol=1e-3):
        return (f"dW1 is {case.n} times too small: the rows' contributions were averaged over "
                "the devices; the gradient of a sum over the batch is their sum.")
    return None


def _whole(case) -> int:
    return case.nbytes("W1")  # W1 gathered, and the partial dW1[D, F] each device reduces


FSDP_BOTH = harness.Build(
    what="your fsdp_layer", layouts=("In[B_X, D]", "W1[D_X, F]", "dOut[B_X, F]"),
    out=("Out[B_X, F]", "dW1[D_X, F]"), out_names=("Out", "dW1"), axes=("X",),
    inputs=_inputs, reference=_both, diagnose=_diagnose, rtol=1e-4, atol=1e-3,
    cases=(((8,), {"B": 16, "D": 32, "F": 24}), ((8,), {"B": 24, "D": 16, "F": 40}),
           ((4,), {"B": 8, "D": 32, "F": 24}), ((4,), {"B": 12, "D": 20, "F": 8})),
    collectives=lambda case: [
        harness.Expect("all-gather", _whole(case), ("X",), what="W1"),
        harness.Expect("reduce-scatter", _whole(case), ("X",), what="the partial dW1")],
    unavailable=DERIVED,
    hint="Forward: which operand must each device complete before its rows of Out, and along "
         "which dimension? Backward: dW1 = Inᵀ · dOut contracts over B, which is split, so each "
         "device holds a partial sum of all of dW1; which one collective sums it and leaves "
         "each device its own rows of D?",
    praise="FSDP's layer: W1 gathered for the product, its gradient summed and split back to "
           "the rows each device keeps.")


@checker("FSDP's layer, forward and weight gradient")
def check_fsdp_layer(fn) -> str:
    """``fn(x_rows, w_rows, dout_rows) -> (out_rows, dw_rows)`` per device along "X":
    Out[B_X, F] = In[B_X, D] · W1[D_X, F] and dW1[D_X, F] = Inᵀ · dOut[B_X, F], on 8 and 4
    devices at several sizes; the compiled program holds exactly one all-gather of W1 and one
    reduce-scatter of the partial dW1 along X (jax.vjp and jax.grad out of reach)."""
    return harness.grade(fn, FSDP_BOTH)
