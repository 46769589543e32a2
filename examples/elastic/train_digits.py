"""Elastic softmax regression on scikit-learn's digits, with hvdlite.numpy.

    hvdliterun --min-np 1 --max-np 3 \
        --host-discovery-script examples/elastic/discover_hosts.sh \
        python examples/elastic/train_digits.py

While it runs, add a host to examples/elastic/hosts.txt (the job grows at the
next commit) or kill a worker (the others restore the last commit and go on).
The state that survives is in hvd.elastic.ObjectState: the weights, and where
in the data the job is.
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
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--batches-per-commit", type=int, default=5)
    parser.add_argument("--step-delay", type=float, default=0.02,
                        help="seconds to sleep per batch, so there is time to add hosts")
    args = parser.parse_args()

    hvd.init()
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(digits.data / 16.0, digits.target,
                                                        test_size=0.25, random_state=0)
    y_onehot = np.eye(10)[y_train]
    # A new worker starts from these values; sync() then gives it rank 0's.
    state = hvd.elastic.ObjectState(
        weights=np.random.default_rng(0).normal(0, 0.01, (64, 10)), bias=np.zeros(10),
        epoch=0, batch=0)
    state.register_reset_callbacks([
        lambda: hvd.rank() == 0 and print(f"re-formed at {hvd.size()} rank(s)", flush=True)])

    @hvd.elastic.run
    def train(state):
        batches = len(x_train) // args.batch_size
        while state.epoch < args.epochs:
            order = np.random.default_rng(state.epoch).permutation(len(x_train))
            while state.batch < batches:
                # This rank's share of the global batch, at whatever size the job has now.
                rows = order[state.batch * args.batch_size:(state.batch + 1) * args.batch_size]
                mine = np.array_split(rows, hvd.size())[hvd.rank()]
                grads = softmax_gradient(state.weights, state.bias, x_train[mine], y_onehot[mine])
                # Weighted by rows, so uneven shards still give the global batch's gradient.
                grad_w, grad_b = hvd.grouped_allreduce([g * len(mine) for g in grads], op=hvd.Sum,
                                                       name="grads")
                state.weights = state.weights - args.lr * grad_w / len(rows)
                state.bias = state.bias - args.lr * grad_b / len(rows)
                state.batch += 1
                time.sleep(args.step_delay)
                if state.batch % args.batches_per_commit == 0:
                    state.commit()
            state.epoch, state.batch = state.epoch + 1, 0
            state.commit()

    train(state)
    accuracy = float(np.mean(np.argmax(x_test @ state.weights + state.bias, axis=1) == y_test))
    if hvd.rank() == 0:
        print(f"test accuracy {accuracy:.3f} after {args.epochs} epochs, finishing at "
              f"{hvd.size()} rank(s)")


if __name__ == "__main__":
    main()
