"""The training problem the elastic workers solve, and its single-process
reference: least squares on a fixed data set by full-batch gradient descent."""
import numpy as np

LEARNING_RATE = 0.1
_rng = np.random.default_rng(7)
DATA_X = _rng.normal(size=(12, 4))  # 12 rows: equal shards at 1, 2, 3, 4 ranks
DATA_Y = DATA_X @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.01 * _rng.normal(size=12)


def initial_weights():
    return np.zeros(4)


def gradient(weights, x, y):
    """Mean gradient of 0.5 * (x @ w - y)^2 over the rows of x."""
    return x.T @ (x @ weights - y) / len(x)


def reference_weights(steps):
    weights = initial_weights()
    for _ in range(steps):
        weights = weights - LEARNING_RATE * gradient(weights, DATA_X, DATA_Y)
    return weights
