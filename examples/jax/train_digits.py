"""A small MLP on scikit-learn's digits with hvdlite.jax and optax.

    hvdliterun -np 2 python examples/jax/train_digits.py

Each rank trains on its shard of every batch inside one jax.jit step; the
DistributedOptimizer averages the gradients over the ranks from inside the
compiled step, so every rank holds the same parameters.
"""
import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hvdlite.jax as hvd


def init_params(key, sizes=(64, 32, 10)):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (fan_in, fan_out)) / np.sqrt(fan_in),
                       "b": jnp.zeros(fan_out)})
    return params


def predict(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(predict(params, x), y).mean()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    hvd.init()
    # Each local rank takes its own GPU (docs/gpus.md), before JAX first touches one: with every
    # GPU of the host visible, the local rank's; with one (Slurm --gpus-per-task=1), that one.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or "," in visible:
        mine = hvd.local_rank() % len(visible.split(",")) if visible else hvd.local_rank()
        jax.config.update("jax_cuda_visible_devices", str(mine))
    rank, size = hvd.rank(), hvd.size()
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        (digits.data / 16.0).astype(np.float32), digits.target, test_size=0.25, random_state=0)

    # Different seeds on purpose: broadcasting rank 0's parameters makes them equal.
    params = hvd.broadcast_parameters(init_params(jax.random.PRNGKey(rank)), root_rank=0)
    tx = hvd.DistributedOptimizer(optax.adam(args.lr * size))
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, x, y):
        grads = jax.grad(loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    shuffle = np.random.default_rng(1234)  # same order on every rank
    per_rank = args.batch_size // size
    start = time.perf_counter()
    for _ in range(args.epochs):
        order = shuffle.permutation(len(x_train))
        for first in range(0, len(order) - args.batch_size + 1, args.batch_size):
            batch = order[first + rank * per_rank: first + (rank + 1) * per_rank]
            params, opt_state = step(params, opt_state, x_train[batch], y_train[batch])
    elapsed = time.perf_counter() - start

    accuracy = float(jnp.mean(jnp.argmax(predict(params, x_test), axis=1) == y_test))
    first = params[0]["w"]
    spread = hvd.allreduce(first, op=hvd.Max) - hvd.allreduce(first, op=hvd.Min)
    assert float(jnp.max(spread)) == 0.0, "ranks diverged"
    if rank == 0:
        print(f"{size} rank(s): test accuracy {accuracy:.3f} after {args.epochs} epochs "
              f"in {elapsed:.2f} s")
    hvd.shutdown()


if __name__ == "__main__":
    main()
