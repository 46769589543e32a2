"""Data-parallel softmax regression on scikit-learn's digits, with hvdlite.numpy.

    hvdliterun -np 2 python examples/numpy/train_digits.py

Each rank trains on its shard of every batch; gradients are averaged with
allreduce, so every rank holds the same weights, and the run reaches the same
accuracy as one process training on the whole batch.
"""
import argparse
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hvdlite.numpy as hvd


def softmax_gradient(weights, bias, x, y_onehot):
    logits = x @ weights + bias
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    error = (probs - y_onehot) / len(x)
    return x.T @ error, error.sum(axis=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--lr", type=float, default=0.5)
    args = parser.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    digits = load_digits()
    x = digits.data / 16.0
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.25,
                                                        random_state=0)
    y_onehot = np.eye(10)[y_train]

    # Different seeds on purpose: broadcasting rank 0's weights makes them equal.
    rng = np.random.default_rng(rank)
    weights = hvd.broadcast(rng.normal(0, 0.01, (64, 10)), root_rank=0, name="init.weights")
    bias = hvd.broadcast(np.zeros(10), root_rank=0, name="init.bias")

    shuffle = np.random.default_rng(1234)  # same order on every rank
    per_rank = args.batch_size // size
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = shuffle.permutation(len(x_train))
        for first in range(0, len(order) - args.batch_size + 1, args.batch_size):
            batch = order[first + rank * per_rank: first + (rank + 1) * per_rank]
            grad_w, grad_b = softmax_gradient(weights, bias, x_train[batch], y_onehot[batch])
            grad_w, grad_b = hvd.grouped_allreduce([grad_w, grad_b], op=hvd.Average, name="grads")
            weights -= args.lr * grad_w
            bias -= args.lr * grad_b
    elapsed = time.perf_counter() - start

    accuracy = float(np.mean(np.argmax(x_test @ weights + bias, axis=1) == y_test))
    # Every rank must hold the same model.
    spread = hvd.allreduce(weights, op=hvd.Max, name="check.max") - hvd.allreduce(
        weights, op=hvd.Min, name="check.min")
    assert np.max(spread) == 0.0, "ranks diverged"
    if rank == 0:
        print(f"{size} rank(s): test accuracy {accuracy:.3f} after {args.epochs} epochs "
              f"in {elapsed:.2f} s")
    hvd.shutdown()


if __name__ == "__main__":
    main()
