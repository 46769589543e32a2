"""One model.fit epoch on N ranks against one process on the same data, on the
Keras backend KERAS_BACKEND selects (the issue's per-backend number).

    KERAS_BACKEND=jax hvdliterun -np 2 python bench/keras_epoch.py
    KERAS_BACKEND=jax python bench/keras_epoch.py          # one process

Every run sees the same global data and global batch: N ranks each fit
1/N of the rows with 1/N of the batch. The first epoch compiles the step and
is not counted; the median of the next --epochs epochs is printed by rank 0.
"""
import argparse
import time

import keras
import numpy as np

import hvdlite.keras as hvd


class EpochTimer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times, self.start = [], None

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.times.append(time.perf_counter() - self.start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=128, help="global batch size")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs")
    args = parser.parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, 64)).astype("float32")
    y = rng.integers(0, 10, size=args.rows)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = EpochTimer()
    model.fit(x[rank::size], y[rank::size], batch_size=args.batch_size // size,
              epochs=args.epochs + 1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), timer])
    if rank == 0:
        steps = args.rows // args.batch_size
        print(f"{keras.backend.backend()} {size} process(es): one epoch of {steps} steps "
              f"{np.median(timer.times[1:]) * 1000:.0f} ms (median of {args.epochs}; "
              f"all: {', '.join(f'{t * 1000:.0f}' for t in timer.times[1:])} ms)")


if __name__ == "__main__":
    main()
