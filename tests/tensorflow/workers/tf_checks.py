"""Checks shared by the TensorFlow workers: each exits non-zero with a message
on the first mismatch, so that the test names what differed on which rank."""
import sys

import numpy as np
import tensorflow as tf


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def close(actual, expected, what, atol=1e-6):
    if isinstance(actual, (tf.Tensor, tf.Variable)):
        actual = actual.numpy()
    actual = np.asarray(actual).astype(np.float64)
    check(actual.shape == np.shape(expected) and np.allclose(actual, expected, atol=atol),
          f"{what}: got {actual}, expected {expected}")
