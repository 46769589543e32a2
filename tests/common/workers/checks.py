"""The checks every binding's workers share (numpy, torch, TensorFlow, Keras,
JAX): a failed check prints "FAILED: <what>" and exits 1, so the job fails
with the reason in the rank's output, and, unlike assert, still checks under
python -O. Workers outside this folder put it on sys.path:

    sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
    from checks import check, close
"""
import sys

import numpy as np


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def as_float64(value):
    """Any framework's tensor or variable (torch, TensorFlow, Keras, JAX), or an
    array-like, as a float64 NumPy array (bfloat16 included)."""
    if hasattr(value, "detach"):  # torch, whose .numpy() knows no bfloat16
        value = value.detach().cpu().double()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    return np.asarray(value).astype(np.float64)


def close(got, want, what, atol=1e-5, rtol=1e-5):
    """Checks got has want's shape and values, within atol + rtol * |want|."""
    got, want = as_float64(got), as_float64(want)
    same = got.shape == want.shape and np.allclose(got, want, rtol=rtol, atol=atol)
    difference = f" (max difference {np.abs(got - want).max():.3g})" \
        if got.shape == want.shape and got.size else ""
    check(same, f"{what}: got {got!r}, want {want!r}{difference}")
