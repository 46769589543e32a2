"""A custom TensorFlow training loop with hvd.DistributedGradientTape, on
scikit-learn's digits.

    hvdliterun -np 2 python examples/tensorflow/train_digits.py
    python examples/tensorflow/train_digits.py       # one process, for comparison

Each rank takes its slice of every global batch; the tape averages gradients,
so every rank applies the same update as one process on the whole batch.
"""
import argparse

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hvdlite.tensorflow as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    gpus = tf.config.list_physical_devices("GPU")  # each local rank takes its own GPU, and only
    if gpus:                                        # the memory it uses (docs/gpus.md)
        mine = gpus[hvd.local_rank() % len(gpus)]
        tf.config.set_visible_devices(mine, "GPU")
        tf.config.experimental.set_memory_growth(mine, True)
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        (digits.data / 16.0).astype("float32"), digits.target, test_size=0.25, random_state=0)

    tf.random.set_seed(rank)  # different on purpose: broadcast_variables fixes it
    model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.SGD(args.lr, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    hvd.broadcast_variables(model.variables, root_rank=0)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    shuffle = np.random.default_rng(1234)  # the same order on every rank
    per_rank = args.batch_size // size
    for epoch in range(args.epochs):
        order = shuffle.permutation(len(x_train))
        for first in range(0, len(order) - args.batch_size + 1, args.batch_size):
            batch = order[first + rank * per_rank:first + (rank + 1) * per_rank]
            loss = train_step(x_train[batch], y_train[batch])
        if rank == 0 and (epoch + 1) % 10 == 0:
            print(f"epoch {epoch + 1}: loss {float(loss):.4f}")
    predictions = np.argmax(model(x_test).numpy(), axis=1)
    accuracy = float(np.mean(predictions == y_test))
    if rank == 0:
        print(f"ranks: {size}  test accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    main()
