"""Keras 3 model.fit on scikit-learn's digits, data-parallel with hvdlite.keras.

    hvdliterun -np 2 python examples/keras/train_digits.py
    python examples/keras/train_digits.py            # one process, for comparison

The five Horovod lines: init, shard the data, scale the learning rate, wrap the
optimizer, broadcast the initial state. Every rank sees 1/size of each epoch;
gradients are averaged, so the result matches one process on the whole data.
"""
import argparse

import keras
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hvdlite.keras as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank")
    args = parser.parse_args()

    hvd.init()
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        (digits.data / 16.0).astype("float32"), digits.target, test_size=0.25, random_state=0)
    # Each rank trains on its own shard.
    x_shard, y_shard = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    keras.utils.set_random_seed(hvd.rank())  # different on purpose: the broadcast fixes it
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    optimizer = keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(args.lr * hvd.size(), warmup_epochs=3),
    ]
    model.fit(x_shard, y_shard, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=callbacks, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    if hvd.rank() == 0:
        print(f"ranks: {hvd.size()}  test accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    main()
