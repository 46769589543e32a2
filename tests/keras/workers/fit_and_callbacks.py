"""hvdlite.keras on every rank, in one process (TF import is slow): model.fit
with DistributedOptimizer against a single-process fit on the global batch,
each callback's effect, backward_passes_per_step, compression, load_model and
the NumPy helpers. Exits non-zero with a message on the first mismatch. The
same checks run on every Keras backend (KERAS_BACKEND=tensorflow, torch, jax)."""
import os
import sys
import tempfile
from pathlib import Path

import keras
import numpy as np

import hvdlite.keras as hvd

BACKEND = keras.backend.backend()
if BACKEND == "tensorflow":
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close, run_checks  # noqa: E402
from fit_data import (PER_RANK_BATCH, STEPS, dataset, make_model,  # noqa: E402
                      same_on_every_rank, shard)


def fit_distributed_vs_single(rank, size, optimizer_fn, what, jit_compile="auto",
                              epochs=2, **options):
    x, y = dataset(size)
    model = make_model(keras, 0)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer_fn(), **options), loss="mse",
                  jit_compile=jit_compile)
    model.fit(shard(x, rank, size), shard(y, rank, size), batch_size=PER_RANK_BATCH,
              epochs=epochs, shuffle=False, verbose=0)
    # XLA cannot run TF's custom ops (fit trains without it); JAX keeps its jitted step.
    check(model.jit_compile == (BACKEND == "jax"),
          f"{what}: {BACKEND} model has jit_compile={model.jit_compile}")
    same_on_every_rank(model.get_weights(), what)
    return model


def reference_fit(size, optimizer, epochs=2):
    x, y = dataset(size)
    model = make_model(keras, 0)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=size * PER_RANK_BATCH, epochs=epochs, shuffle=False, verbose=0)
    return model.get_weights()


def check_fit(rank, size):
    for name, opt in [("SGD", lambda: keras.optimizers.SGD(0.1, momentum=0.9)),
                      ("Adam", lambda: keras.optimizers.Adam(0.01))]:
        model = fit_distributed_vs_single(rank, size, opt, f"fit {name}")
        for got, want in zip(model.get_weights(), reference_fit(size, opt())):
            close(got, want, f"fit {name} vs single process")
    # Gradients sent as float16: within fp16's precision of the reference.
    model = fit_distributed_vs_single(rank, size, lambda: keras.optimizers.SGD(0.1),
                                      "fit fp16", epochs=1, compression=hvd.Compression.fp16)
    for got, want in zip(model.get_weights(), reference_fit(size, keras.optimizers.SGD(0.1), 1)):
        close(got, want, "fit compression=fp16 vs single process", atol=1e-3)
    # jit_compile=True: XLA cannot run the TF ops, so fit trains without it.
    model = fit_distributed_vs_single(rank, size, lambda: keras.optimizers.SGD(0.1),
                                      "fit jit_compile=True", jit_compile=True, epochs=1)
    for got, want in zip(model.get_weights(), reference_fit(size, keras.optimizers.SGD(0.1), 1)):
        close(got, want, "fit jit_compile=True vs single process")


def check_backward_passes(rank, size):
    # Averaged aggregation equals Keras' own accumulation on the global batch...
    model = fit_distributed_vs_single(rank, size, lambda: keras.optimizers.SGD(0.1),
                                      "backward_passes_per_step", backward_passes_per_step=2,
                                      average_aggregated_gradients=True)
    ref = reference_fit(size, keras.optimizers.SGD(0.1, gradient_accumulation_steps=2))
    for got, want in zip(model.get_weights(), ref):
        close(got, want, "backward_passes_per_step=2 (averaged) vs single process")
    # ... and Horovod's default sums the aggregated gradients (for SGD: twice the step).
    model = fit_distributed_vs_single(rank, size, lambda: keras.optimizers.SGD(0.1),
                                      "backward_passes_per_step sum", backward_passes_per_step=2)
    ref = reference_fit(size, keras.optimizers.SGD(0.2, gradient_accumulation_steps=2))
    for got, want in zip(model.get_weights(), ref):
        close(got, want, "backward_passes_per_step=2 (summed) vs single process")


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epoch_logs, self.batch_lr = [], []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_logs.append(dict(logs))

    def on_train_batch_begin(self, batch, logs=None):
        self.batch_lr.append(float(np.asarray(self.model.optimizer.learning_rate)))


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """LearningRateWarmupCallback's rates over 2 warm-up epochs, as a schedule of the step."""

    def __init__(self, initial, size):
        self.initial, self.size = initial, size

    def __call__(self, step):
        epoch = keras.ops.cast(step, "float32") / STEPS
        warm = self.initial / self.size * (epoch * (self.size - 1) / 2 + 1)
        return keras.ops.where(epoch < 2, warm, self.initial)


def check_callbacks(rank, size):
    x, y = dataset(size)
    xs, ys = shard(x, rank, size), shard(y, rank, size)
    # Broadcast: differently seeded ranks end identical (and would not without it).
    for with_broadcast in (True, False):
        model = make_model(keras, rank + 10)
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
        callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if with_broadcast else []
        model.fit(xs, ys, batch_size=PER_RANK_BATCH, epochs=1, verbose=0, callbacks=callbacks)
        w = model.get_weights()[0]
        differs = np.abs(hvd.allreduce(w, op=hvd.Max) - hvd.allreduce(w, op=hvd.Min)).max() > 0
        check(differs != with_broadcast, f"BroadcastGlobalVariablesCallback={with_broadcast}: "
                                         f"ranks differ={differs}")
        if with_broadcast:
            # The same callback in a later fit() does not broadcast again (Horovod's
            # once per callback): a difference made between the fits stays.
            model.set_weights([v + 0.01 * rank for v in model.get_weights()])
            model.fit(xs, ys, batch_size=PER_RANK_BATCH, epochs=1, verbose=0, callbacks=callbacks)
            w = model.get_weights()[0]
            gap = float((hvd.allreduce(w, op=hvd.Max) - hvd.allreduce(w, op=hvd.Min)).max())
            check(abs(gap - 0.01 * (size - 1)) < 1e-4, "BroadcastGlobalVariablesCallback reused in a "
                  f"second fit(): ranks differ by {gap}, want {0.01 * (size - 1)}")
    # Metric averaging: local logs before it, the ranks' mean after it, same everywhere.
    before, after = Recorder(), Recorder()
    model = make_model(keras, 0)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse",
                  metrics=["mae"])
    model.fit(xs, ys, batch_size=PER_RANK_BATCH, epochs=2, verbose=0,
              callbacks=[before, hvd.callbacks.MetricAverageCallback(), after])
    for epoch in range(2):
        for key in ("loss", "mae"):
            local = before.epoch_logs[epoch][key]
            averaged = after.epoch_logs[epoch][key]
            close(averaged, hvd.allreduce(np.float64(local)), f"MetricAverageCallback {key}")
            close(hvd.allreduce(np.float64(averaged), op=hvd.Max), averaged,
                  f"MetricAverageCallback {key} same on every rank", atol=0)
    # Warmup: per batch from initial_lr / size up to initial_lr over warmup_epochs.
    recorder = Recorder()
    initial = 0.1 * size
    model = make_model(keras, 0)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(initial)), loss="mse")
    warmup = hvd.callbacks.LearningRateWarmupCallback(initial, warmup_epochs=2)
    model.fit(xs, ys, batch_size=PER_RANK_BATCH, epochs=3, shuffle=False, verbose=0,
              callbacks=[warmup, recorder])
    expected = [initial / size * ((e + b / STEPS) * (size - 1) / 2 + 1)
                for e in range(2) for b in range(STEPS)] + [initial] * STEPS
    close(recorder.batch_lr, expected, "LearningRateWarmupCallback schedule")
    # ... and each step used it (the JAX backend keeps its state outside the
    # variables during fit): one process with the same rates as a schedule.
    reference = reference_fit(size, keras.optimizers.SGD(WarmupSchedule(initial, size)), 3)
    for got, want in zip(model.get_weights(), reference):
        close(got, want, "LearningRateWarmupCallback vs one process with the same rates")
    # Schedule: x0.5 from epoch 1 on (staircase).
    recorder = Recorder()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.2)), loss="mse")
    schedule = hvd.callbacks.LearningRateScheduleCallback(0.2, 0.5, start_epoch=1)
    model.fit(xs, ys, batch_size=PER_RANK_BATCH, epochs=2, verbose=0,
              callbacks=[schedule, recorder])
    close(recorder.batch_lr, [0.2] * STEPS + [0.1] * STEPS, "LearningRateScheduleCallback")


def check_load_model(rank, size):
    x, y = dataset(size)
    model = fit_distributed_vs_single(rank, size, lambda: keras.optimizers.Adam(0.01), "save",
                                      epochs=1)
    path = os.path.join(tempfile.mkdtemp(), f"model{rank}.keras")
    model.save(path)
    loaded = hvd.load_model(path)
    check(getattr(loaded.optimizer, "_hvdlite_distributed", False), "load_model: plain optimizer")
    iterations = int(keras.ops.convert_to_numpy(loaded.optimizer.iterations))
    check(iterations == STEPS, f"load_model lost optimizer state: {iterations} iterations")
    loaded.fit(shard(x, rank, size), shard(y, rank, size), batch_size=PER_RANK_BATCH, epochs=1,
               shuffle=False, verbose=0)
    same_on_every_rank(loaded.get_weights(), "after load_model + fit")


def check_helpers(rank, size):
    if BACKEND == "tensorflow":
        import hvdlite.tensorflow.keras as tf_keras
        check(tf_keras is hvd, "hvdlite.tensorflow.keras is not hvdlite.keras")
    close(hvd.allreduce(np.array([rank, 1.0])), [(size - 1) / 2, 1.0], "keras allreduce")
    close(hvd.allgather(np.array([[rank]])), np.arange(size).reshape(-1, 1), "keras allgather")
    close(hvd.broadcast(np.array([rank + 5]), 1), [6], "keras broadcast")
    try:
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=0)
        check(False, "backward_passes_per_step=0 accepted")
    except ValueError as error:
        check("backward_passes_per_step" in str(error), str(error))


CHECKS = [check_helpers, check_fit, check_backward_passes, check_callbacks, check_load_model]
DONE = "keras OK"


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
