"""hvdlite.keras with Keras 2 (TF_USE_LEGACY_KERAS=1, the tf_keras package) on
every rank: model.fit with DistributedOptimizer (legacy and new-style tf_keras
optimizers, lr=) against one process on the global batch, the callbacks,
backward_passes_per_step=2 against a NumPy-free single-process reference,
_compute_gradients, get_gradients in a v1 graph, load_model. Exits non-zero
with a message on the first mismatch."""
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

import hvdlite.keras as hvd
import hvdlite.tensorflow.keras as hvd_tf_keras

keras = tf.keras  # tf_keras, since TF_USE_LEGACY_KERAS=1
tf.get_logger().setLevel("ERROR")
PER_RANK_BATCH = 4
STEPS = 4


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def close(a, b, what, atol=1e-5):
    a, b = np.asarray(a), np.asarray(b)
    check(a.shape == b.shape and np.allclose(a, b, atol=atol), f"{what}: {a} vs {b}")


def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


def dataset(size):
    rng = np.random.default_rng(42)
    n = size * PER_RANK_BATCH * STEPS
    return rng.normal(size=(n, 5)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")


def shard(array, rank, size):
    batches = array.reshape(STEPS, size, PER_RANK_BATCH, *array.shape[1:])
    return batches[:, rank].reshape(-1, *array.shape[1:])


def same_on_every_rank(weights, what):
    for i, w in enumerate(weights):
        spread = hvd.allreduce(w, op=hvd.Max) - hvd.allreduce(w, op=hvd.Min)
        check(np.abs(spread).max() == 0, f"{what}: weight {i} differs across ranks")


class RecordLoss(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.loss = logs["loss"]


def check_setup(rank, size):
    check(keras.__name__.startswith("tf_keras"), f"tf.keras is {keras.__name__}")
    check(hvd_tf_keras is hvd, "hvdlite.tensorflow.keras is not hvdlite.keras")
    check(issubclass(hvd.callbacks.BroadcastGlobalVariablesCallback, keras.callbacks.Callback),
          "callbacks are not Keras 2 callbacks")


def check_fit(rank, size):
    x, y = dataset(size)
    for what, make in [("legacy SGD(lr=)", lambda: keras.optimizers.legacy.SGD(lr=0.05,
                                                                             momentum=0.9)),
                       ("new-style Adam", lambda: keras.optimizers.Adam(0.01))]:
        model = make_model(rank)  # different on every rank: the callback fixes that
        model.compile(optimizer=hvd.DistributedOptimizer(make()), loss="mse")
        record = RecordLoss()
        model.fit(shard(x, rank, size), shard(y, rank, size), batch_size=PER_RANK_BATCH,
                  epochs=2, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                             hvd.callbacks.MetricAverageCallback(), record])
        reference = make_model(0)
        reference.compile(optimizer=make(), loss="mse")
        reference.fit(x, y, batch_size=PER_RANK_BATCH * size, epochs=2, shuffle=False,
                      verbose=0)
        for w, r in zip(model.get_weights(), reference.get_weights()):
            close(w, r, f"fit with {what} vs one process")
        check(type(model.optimizer).__name__ == type(make()).__name__, "class name changed")
        losses = hvd.allgather(np.array([record.loss]))
        check(np.all(losses == losses[0]), f"MetricAverageCallback: losses {losses} differ")
    # The Keras 2 optimizer API: lr, get_config, iterations.
    optimizer = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(lr=0.5))
    close(float(keras.backend.get_value(optimizer.lr)), 0.5, "lr of the wrapped optimizer")


def reference_aggregated(x, y, size, make, passes, average):
    model = make_model(0)
    optimizer = make()
    for first in range(0, STEPS, passes):
        total = None
        for step in range(first, first + passes):
            rows = slice(step * size * PER_RANK_BATCH, (step + 1) * size * PER_RANK_BATCH)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x[rows]) - y[rows]) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            total = grads if total is None else [t + g for t, g in zip(total, grads)]
        if average:
            total = [t / passes for t in total]
        optimizer.apply_gradients(zip(total, model.trainable_variables))
    return model.get_weights()


def check_aggregation(rank, size):
    x, y = dataset(size)
    for what, make, average in [
            ("legacy SGD", lambda: keras.optimizers.legacy.SGD(0.05, momentum=0.9), False),
            ("new-style SGD", lambda: keras.optimizers.SGD(0.05, momentum=0.9), True)]:
        model = make_model(0)
        optimizer = hvd.DistributedOptimizer(make(), backward_passes_per_step=2,
                                             average_aggregated_gradients=average)
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(shard(x, rank, size), shard(y, rank, size), batch_size=PER_RANK_BATCH,
                  epochs=1, shuffle=False, verbose=0)
        expected = reference_aggregated(x, y, size, make, 2, average)
        for w, r in zip(model.get_weights(), expected):
            close(w, r, f"backward_passes_per_step=2 with {what} (average={average})")
        check(int(optimizer.iterations.numpy()) == STEPS, "iterations should count every batch")


def check_compute_and_get_gradients(rank, size):
    model = make_model(0)
    x = np.full((2, 5), rank + 1.0, "float32")
    optimizer = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1))
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(model(x))
    plain = tape.gradient(loss, model.trainable_variables)
    reduced = optimizer._compute_gradients(loss, model.trainable_variables, tape=tape)
    for (g, _), p in zip(reduced, plain):
        close(g, hvd.allreduce(p.numpy()), "_compute_gradients is not averaged")
    with tf.Graph().as_default():
        v = tf.compat.v1.Variable([1.0, 2.0])
        loss = tf.reduce_sum(v * float(rank + 1))
        grads = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1)).get_gradients(loss, [v])
        with tf.compat.v1.Session() as session:
            session.run(v.initializer)
            close(session.run(grads[0]), np.full(2, (size + 1) / 2), "get_gradients in a v1 graph")


def check_lr_warmup_and_load_model(rank, size):
    x, y = dataset(size)
    model = make_model(0)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1)),
                  loss="mse")
    model.fit(shard(x, rank, size), shard(y, rank, size), batch_size=PER_RANK_BATCH, epochs=2,
              shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=1,
                                                                  steps_per_epoch=STEPS)])
    close(float(keras.backend.get_value(model.optimizer.lr)), 0.1, "lr after warmup")
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, f"model{rank}.keras")
        model.save(path)
        loaded = hvd.load_model(path)
    check(getattr(loaded.optimizer, "_hvdlite_distributed", False), "loaded optimizer not wrapped")
    # Ranks whose data differ still end identical: the gradients are averaged.
    rng = np.random.default_rng(rank)
    loaded.fit(rng.normal(size=(8, 5)), rng.normal(size=(8, 1)), batch_size=4, epochs=1,
               verbose=0)
    same_on_every_rank(loaded.get_weights(), "after load_model and fit")


PARTS = {"setup": check_setup, "fit": check_fit, "aggregation": check_aggregation,
         "gradients": check_compute_and_get_gradients,
         "load_model": check_lr_warmup_and_load_model}


def main():
    hvd.init()
    for name in sys.argv[1:] or PARTS:
        PARTS[name](hvd.rank(), hvd.size())
    print("keras2 OK", flush=True)


if __name__ == "__main__":
    main()
