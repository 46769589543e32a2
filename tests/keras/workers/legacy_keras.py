"""hvdlite.keras with Keras 2 (TF_USE_LEGACY_KERAS=1, the tf_keras package) on
every rank: model.fit with DistributedOptimizer (legacy and new-style tf_keras
optimizers, lr=) against one process on the global batch, the callbacks,
backward_passes_per_step=2 against a NumPy-free single-process reference,
_compute_gradients, get_gradients in a v1 graph, load_model; and Horovod's
Keras 2 surface on both kinds of optimizer: _agg_helper and its counter,
aggregation inside tf.function with local variables, with an infinite
gradient and with an Embedding's IndexedSlices, PartialDistributedOptimizer.
Exits non-zero with a message on the first mismatch."""
import itertools
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

import hvdlite.keras as hvd
import hvdlite.tensorflow.keras as hvd_tf_keras

keras = tf.keras  # tf_keras, since TF_USE_LEGACY_KERAS=1
tf.get_logger().setLevel("ERROR")

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close, run_checks  # noqa: E402
from fit_data import (PER_RANK_BATCH, STEPS, dataset, make_model,  # noqa: E402
                      same_on_every_rank, shard)


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
        model = make_model(keras, rank)  # different on every rank: the callback fixes that
        model.compile(optimizer=hvd.DistributedOptimizer(make()), loss="mse")
        record = RecordLoss()
        model.fit(shard(x, rank, size), shard(y, rank, size), batch_size=PER_RANK_BATCH,
                  epochs=2, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                             hvd.callbacks.MetricAverageCallback(), record])
        reference = make_model(keras, 0)
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


def reference_aggregated(x, y, size, make, passes, average, model_maker=None):
    model = model_maker(0) if model_maker else make_model(keras, 0)
    optimizer = make()
    for first in range(0, STEPS, passes):
        total = None
        for step in range(first, first + passes):
            rows = slice(step * size * PER_RANK_BATCH, (step + 1) * size * PER_RANK_BATCH)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x[rows]) - y[rows]) ** 2)
            # Dense, so that an Embedding's IndexedSlices sum as the ranks' do.
            grads = tape.gradient(loss, model.trainable_variables)
            grads = [tf.convert_to_tensor(g) for g in grads]
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
        model = make_model(keras, 0)
        optimizer = hvd.DistributedOptimizer(make(), backward_passes_per_step=2,
                                             average_aggregated_gradients=average)
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(shard(x, rank, size), shard(y, rank, size), batch_size=PER_RANK_BATCH,
                  epochs=1, shuffle=False, verbose=0)
        expected = reference_aggregated(x, y, size, make, 2, average)
        for w, r in zip(model.get_weights(), expected):
            close(w, r, f"backward_passes_per_step=2 with {what} (average={average})")
        check(int(optimizer.iterations.numpy()) == STEPS, "iterations should count every batch")


# Both kinds of Keras 2 optimizer, for the checks of Horovod's Keras 2 surface.
OPTIMIZERS = [("legacy", keras.optimizers.legacy), ("new-style", keras.optimizers)]


def check_compute_and_get_gradients(rank, size):
    model = make_model(keras, 0)
    x = np.full((2, 5), rank + 1.0, "float32")
    for kind, optimizers in OPTIMIZERS:
        optimizer = hvd.DistributedOptimizer(optimizers.SGD(0.1))
        with tf.GradientTape(persistent=True) as tape:
            loss = tf.reduce_sum(model(x))
        plain = tape.gradient(loss, model.trainable_variables)
        reduced = optimizer._compute_gradients(loss, model.trainable_variables, tape=tape)
        for (g, _), p in zip(reduced, plain):
            close(g, hvd.allreduce(p.numpy()), f"{kind} _compute_gradients(tape=) is not averaged")
        # A callable loss needs no tape.
        reduced = optimizer._compute_gradients(lambda: tf.reduce_sum(model(x)),
                                               model.trainable_variables)
        for (g, _), p in zip(reduced, plain):
            close(g, hvd.allreduce(p.numpy()), f"{kind} _compute_gradients(callable) is wrong")
        for (g, _), (a, _) in zip(reduced, optimizer._aggregate_gradients(reduced)):
            close(a, g, f"{kind} _aggregate_gradients changed reduced gradients")
    with tf.Graph().as_default():
        v = tf.compat.v1.Variable([1.0, 2.0])
        loss = tf.reduce_sum(v * float(rank + 1))
        grads = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1)).get_gradients(loss, [v])
        with tf.compat.v1.Session() as session:
            session.run(v.initializer)
            close(session.run(grads[0]), np.full(2, (size + 1) / 2), "get_gradients in a v1 graph")


def check_lr_warmup_and_load_model(rank, size):
    x, y = dataset(size)
    model = make_model(keras, 0)
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


def check_aggregation_in_function(rank, size):
    """Horovod's test of backward_passes_per_step inside tf.function: half the
    variables local, IndexedSlices gradients (tf.gather) with sparse_as_dense,
    plain SGD(1.0) so that every update is minus the applied gradient."""
    passes, steps = 4, 10
    for (kind, optimizers), average in itertools.product(OPTIMIZERS, [False, True]):
        optimizer = hvd.DistributedOptimizer(optimizers.SGD(1.0), sparse_as_dense=True,
                                             backward_passes_per_step=passes,
                                             average_aggregated_gradients=average)
        check(int(optimizer._agg_helper.counter.numpy()) == 0, "_agg_helper.counter at start")
        xs = [tf.Variable([0.0]) for _ in range(4)]
        ys = [tf.Variable([1.0, 2.0]) for _ in range(4)]
        for v in xs[:2] + ys[:2]:
            optimizer.register_local_var(v)

        def loss():  # d/dx = 1, d/dy = [-(rank + 1), 0] (as IndexedSlices)
            return tf.add_n([x - (rank + 1.0) * tf.gather(y, [0]) for x, y in zip(xs, ys)])

        # Horovod's test passes experimental_aggregate_gradients=False, as
        # tf_keras does for an optimizer with _HAS_AGGREGATE_GRAD; both kinds take it.
        options = {"experimental_aggregate_gradients": False} if average else {}

        @tf.function
        def step():
            optimizer.apply_gradients(optimizer._compute_gradients(loss, var_list=[xs, ys]),
                                      **options)

        per_update = 1.0 if average else float(passes)  # summed over the passes
        for index in range(steps):
            step()
            updates = (index + 1) // passes
            what = f"{kind} SGD, backward_passes_per_step in tf.function (average={average})"
            for i, (x, y) in enumerate(zip(xs, ys)):
                local = i < 2  # local gradients are this rank's, divided by the size
                dx = per_update / size if local else per_update
                dy = per_update * ((rank + 1.0) / size if local else (size + 1) / 2)
                close(x, [-updates * dx], f"{what}: x{i} after step {index}")
                close(y, [1.0 + updates * dy, 2.0], f"{what}: y{i} after step {index}")
            check(int(optimizer.iterations.numpy()) == index + 1, f"{what}: iterations")
        counter = int(optimizer._agg_helper.counter.numpy())
        check(counter == steps % passes, f"{what}: _agg_helper.counter is {counter}")
        check(optimizer._agg_helper.backward_passes_per_step == passes, "backward_passes_per_step")
    for kind, optimizers in OPTIMIZERS:
        check(hvd.DistributedOptimizer(optimizers.SGD(1.0))._agg_helper is None,
              f"{kind}: _agg_helper should be None when backward_passes_per_step=1")


def check_infinite_gradients(rank, size):
    """An infinite gradient in one aggregation cycle does not leak into the next
    (Horovod's test, eagerly and inside tf.function)."""
    passes = 2
    for (kind, optimizers), compiled in itertools.product(OPTIMIZERS, [False, True]):
        optimizer = hvd.DistributedOptimizer(optimizers.SGD(0.5), sparse_as_dense=True,
                                             backward_passes_per_step=passes)
        count = tf.Variable(0)
        x = tf.Variable(0.0)

        def loss():
            count.assign_add(1)
            return tf.cond(count > 1, lambda: x, lambda: x * float("inf"))

        def step():
            grads_and_vars = optimizer._compute_gradients(loss, var_list=[x])
            optimizer.apply_gradients(grads_and_vars)
            return grads_and_vars[0][0]

        run = tf.function(step) if compiled else step
        for _ in range(2 * passes):
            grad = run()
        # The second cycle's passes (gradient 1 each) summed, averaged over the ranks.
        close(grad, float(passes), f"{kind} gradient after an infinite one "
                                   f"({'tf.function' if compiled else 'eager'})")


def embedding_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(10, 2),
                             keras.layers.Flatten(), keras.layers.Dense(1)])


def check_sparse_as_dense_aggregation(rank, size):
    """An Embedding's IndexedSlices gradients, densified and aggregated over two
    passes in model.fit, against one process on the global batches."""
    n = size * PER_RANK_BATCH * STEPS
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 10, size=(n, 3)).astype("int32"), rng.normal(size=(n, 1))
    y = y.astype("float32")
    # Without sparse_as_dense too: the sums are dense either way (Horovod refuses that).
    for (kind, optimizers), dense in [(o, True) for o in OPTIMIZERS] + [(OPTIMIZERS[0], False)]:
        model = embedding_model(0)
        optimizer = hvd.DistributedOptimizer(optimizers.SGD(0.1, momentum=0.5),
                                             sparse_as_dense=dense, backward_passes_per_step=2)
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(shard(x, rank, size), shard(y, rank, size), batch_size=PER_RANK_BATCH,
                  epochs=1, shuffle=False, verbose=0)
        expected = reference_aggregated(x, y, size, lambda: optimizers.SGD(0.1, momentum=0.5),
                                        2, False, embedding_model)
        for w, r in zip(model.get_weights(), expected):
            close(w, r, f"{kind} sparse_as_dense={dense}, backward_passes_per_step=2 "
                        f"vs one process")
        model.train_on_batch(shard(x, rank, size)[:PER_RANK_BATCH],
                             shard(y, rank, size)[:PER_RANK_BATCH])
        counter = int(optimizer._agg_helper.counter.numpy())
        check(counter == 1, f"{kind}: _agg_helper.counter is {counter} after one more batch")


def check_partial_distributed_optimizer(rank, size):
    """Horovod's test: gradients of local_layers stay this rank's (divided by the
    size), the others are averaged; weights differ by rank so averaging shows."""
    x = np.random.default_rng(rank).random((2, 3)).astype("float32")
    y = np.random.default_rng(10 + rank).random((2, 3, 3)).astype("float32")
    for (kind, optimizers), local_count in itertools.product(OPTIMIZERS, [1, 2]):
        constant = keras.initializers.Constant(rank + 1.0)
        model = keras.Sequential([
            keras.Input((3,)),
            keras.layers.Dense(2, kernel_initializer=constant, bias_initializer=constant),
            keras.layers.RepeatVector(3),
            keras.layers.TimeDistributed(keras.layers.Dense(
                3, kernel_initializer=constant, bias_initializer=constant))])
        local_layers = [model.layers[0], model.layers[2]][:local_count]
        optimizer = hvd.PartialDistributedOptimizer(optimizers.Adam(), sparse_as_dense=True,
                                                    local_layers=local_layers)
        with tf.GradientTape(persistent=True) as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        plain = tape.gradient(loss, model.trainable_weights)
        reduced = optimizer._compute_gradients(loss, model.trainable_weights, tape=tape)
        local_ids = {id(v) for layer in local_layers for v in layer.trainable_weights}
        for (g, v), p in zip(reduced, plain):
            expected = p.numpy() / size if id(v) in local_ids else hvd.allreduce(p.numpy())
            close(g, expected, f"{kind} PartialDistributedOptimizer, {local_count} local "
                               f"layer(s): gradient of {v.name}")
        optimizer.apply_gradients(reduced)  # and it updates


CHECKS = {"setup": check_setup, "fit": check_fit, "aggregation": check_aggregation,
          "gradients": check_compute_and_get_gradients,
          "load_model": check_lr_warmup_and_load_model,
          "aggregation_in_function": check_aggregation_in_function,
          "infinite_gradients": check_infinite_gradients,
          "sparse_as_dense": check_sparse_as_dense_aggregation,
          "partial": check_partial_distributed_optimizer}
DONE = "keras2 OK"


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
