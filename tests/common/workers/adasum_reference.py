"""A direct NumPy implementation of Adasum for the tests to compare against
(csrc/core/adasum.cc is the real one): the pairwise formula on whole tensors,
combined up the tree ((0,1), (2,3)) -> (0..3) with the lower ranks' vector on
the left, each combination computed in float64 and rounded to the tensor's
dtype, as the core does. Also power_of_two_only, for the workers' checks
that need such a number of ranks."""
import functools

import numpy as np


def combine(a, b):
    """Adasum of two vectors: (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, a
    vector of norm^2 below 1e-8 keeping coefficient 1."""
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    dot, xx, yy = float(x @ y), float(x @ x), float(y @ y)
    cx = 1.0 - dot / (2.0 * xx) if xx >= 1e-8 else 1.0
    cy = 1.0 - dot / (2.0 * yy) if yy >= 1e-8 else 1.0
    return (cx * x + cy * y).reshape(a.shape)


def power_of_two_only(check):
    """`check(rank, size)` run only when size is a power of two: Adasum's tree
    needs one, and at other sizes the workers check its refusal instead."""
    @functools.wraps(check)
    def at_a_power_of_two(rank, size):
        if size & (size - 1) == 0:
            check(rank, size)
    return at_a_power_of_two


def adasum(per_rank, round_to=None):
    """Adasum of one tensor per rank (a power of two of them). round_to(v)
    rounds a float64 result to the tensors' dtype (default: astype)."""
    round_to = round_to or (lambda v: v.astype(per_rank[0].dtype))
    vectors = [np.asarray(v) for v in per_rank]
    distance = 1
    while distance < len(vectors):
        for r in range(0, len(vectors), 2 * distance):
            vectors[r] = round_to(combine(vectors[r], vectors[r + distance]))
        distance *= 2
    return vectors[0]
