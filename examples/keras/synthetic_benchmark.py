"""Keras 3 training throughput on synthetic data with hvdlite.keras (samples/sec).

    hvdliterun -np 2 python examples/keras/synthetic_benchmark.py
    hvdliterun -np 2 python examples/keras/synthetic_benchmark.py --compression powersgd
    python examples/keras/synthetic_benchmark.py     # one process

Every rank fits the same small MLP on random data; the reported throughput is
the total over all ranks (per-rank batch x ranks x steps / time).
"""
import argparse
import time

import keras
import numpy as np

import hvdlite.keras as hvd


class StepTimer(keras.callbacks.Callback):
    def __init__(self, warmup_steps):
        super().__init__()
        self.warmup_steps = warmup_steps
        self.start = None
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.steps == self.warmup_steps:
            self.start = time.perf_counter()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64, help="per-rank batch size")
    parser.add_argument("--steps", type=int, default=200, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=512, help="hidden layer width")
    parser.add_argument("--compression", choices=["none", "fp16", "powersgd"], default="none",
                        help="how gradients travel")
    parser.add_argument("--powersgd-rank", type=int, default=4,
                        help="PowerSGD's rank (compressing from the first step)")
    args = parser.parse_args()

    hvd.init()
    rng = np.random.default_rng(hvd.rank())
    total = args.steps + args.warmup_steps
    x = rng.normal(size=(total * args.batch_size, 256)).astype("float32")
    y = rng.integers(0, 10, size=total * args.batch_size)
    model = keras.Sequential([keras.Input((256,)),
                              keras.layers.Dense(args.width, activation="relu"),
                              keras.layers.Dense(args.width, activation="relu"),
                              keras.layers.Dense(10)])
    if args.compression == "powersgd":
        compression = hvd.Compression.powersgd(rank=args.powersgd_rank, start_iter=0)
    else:
        compression = getattr(hvd.Compression, args.compression)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01),
                                                     compression=compression),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = StepTimer(args.warmup_steps)
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=0, shuffle=False,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), timer])
    elapsed = time.perf_counter() - timer.start
    timed = timer.steps - args.warmup_steps
    rate = hvd.allreduce(np.float64(timed * args.batch_size / elapsed), op=hvd.Sum)
    if hvd.rank() == 0:
        params = model.count_params()
        print(f"ranks: {hvd.size()}  params: {params}  per-rank batch: {args.batch_size}  "
              f"compression: {args.compression}  throughput: {float(rate):.0f} samples/sec")


if __name__ == "__main__":
    main()
