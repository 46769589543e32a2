"""hvdlite.keras on every rank (Keras 3, or Keras 2 under TF_USE_LEGACY_KERAS=1):
SyncBatchNormalization against one BatchNormalization on the concatenated
batch (outputs and moving statistics; ranks hold batches of different
sizes), and local variables: PartialDistributedOptimizer / register_local_var
against NumPy, BroadcastGlobalVariablesCallback(local_variables=...).
Exits non-zero with a message on the first mismatch."""
import sys
import warnings
from pathlib import Path

import numpy as np
import tensorflow as tf

import hvdlite.keras as hvd
from hvdlite.keras import flavour

keras = flavour.keras_module()
tf.get_logger().setLevel("ERROR")

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close as close_within, run_checks  # noqa: E402


def close(a, b, what, atol=1e-4):  # float32 batch statistics and moments
    close_within(a, b, what, atol=atol)


def run_sync_batch_norm(rank, size):
    rows = [r + 2 for r in range(size)]  # different batch sizes on every rank
    cases = [((4,), -1, {}), ((3, 2, 4), -1, {"momentum": 0.5}), ((3, 2, 2), 1, {}),
             ((4,), -1, {"center": False, "scale": False, "epsilon": 0.1})]
    if not flavour.legacy_keras():
        cases.append(((4,), -1, {"renorm": True}))
    for shape, axis, options in cases:
        what = f"SyncBatchNormalization {shape} axis={axis} {options}"
        rng = np.random.default_rng(7)
        batches = [rng.normal(3.0, 2.0, size=(n,) + shape).astype("float32") for n in rows]
        full = np.concatenate(batches)
        sync = hvd.SyncBatchNormalization(axis=axis, fused=False, **options)
        # Keras 2's fused kernel (its default for 4-D inputs) corrects the moving
        # variance by n/(n-1); SyncBatchNormalization, as Horovod's, is unfused.
        unfused = {"fused": False} if flavour.legacy_keras() else {}
        reference = keras.layers.BatchNormalization(axis=axis, **options, **unfused)
        for step in range(2):
            out = sync(batches[rank] + step, training=True)
            expected = reference(full + step, training=True)
            start = sum(rows[:rank])
            close(out, np.asarray(expected)[start:start + rows[rank]], f"{what} step {step}")
        close(sync.moving_mean, reference.moving_mean, f"{what} moving_mean")
        close(sync.moving_variance, reference.moving_variance, f"{what} moving_variance")
        close(sync(batches[rank], training=False), np.asarray(
            reference(full, training=False))[start:start + rows[rank]], f"{what} inference")
    # A Keras 3 layer in a compiled model (tf.function) trains, and from_config works.
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4),
                              hvd.SyncBatchNormalization(), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    x = np.random.default_rng(rank).normal(size=(8 * (rank + 1), 3)).astype("float32")
    model.fit(x, x[:, :1], batch_size=4 * (rank + 1), epochs=1, verbose=0)
    layer = model.layers[1]
    spread = hvd.allreduce(layer.moving_mean, op=hvd.Max) - hvd.allreduce(layer.moving_mean,
                                                                           op=hvd.Min)
    check(np.abs(spread).max() < 1e-6, "SyncBatchNormalization moving_mean differs across ranks")
    clone = hvd.SyncBatchNormalization.from_config(layer.get_config())
    check(isinstance(clone, hvd.SyncBatchNormalization), "from_config")
    if flavour.legacy_keras():
        try:
            hvd.SyncBatchNormalization(fused=True)
            check(False, "Keras 2 SyncBatchNormalization(fused=True) did not raise")
        except ValueError as error:
            check("fused" in str(error), str(error))
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hvd.SyncBatchNormalization(fused=True, momentum=0.9)
        check(any("fused" in str(w.message) for w in caught), "fused=True did not warn")


def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"),
                             keras.layers.Dense(1)])


def run_local_variables(rank, size):
    lr = 0.1
    rng = np.random.default_rng(rank)
    x, y = rng.normal(size=(6, 4)).astype("float32"), rng.normal(size=(6, 1)).astype("float32")
    for kind, scale in [("partial", True), ("register", False), ("argument", True)]:
        model = make_model(0)
        local_layer = model.layers[0]
        base = keras.optimizers.SGD(lr)
        if kind == "partial":
            optimizer = hvd.PartialDistributedOptimizer(base, local_layers=[local_layer],
                                                        scale_local_gradients=scale)
        elif kind == "register":
            optimizer = hvd.DistributedOptimizer(base, scale_local_gradients=scale)
            for v in local_layer.trainable_weights:
                optimizer.register_local_var(v)
        else:
            optimizer = hvd.DistributedOptimizer(base,
                                                 local_variables=local_layer.trainable_weights)
        variables = model.trainable_variables
        before = [np.array(v) for v in variables]
        with tf.GradientTape(persistent=True) as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, variables)
        if flavour.legacy_keras():  # Keras 2 reduces where gradients are computed
            optimizer.apply_gradients(optimizer.compute_gradients(loss, variables, tape=tape))
        else:  # Keras 3 just before the update
            optimizer.apply_gradients(zip(grads, variables))
        local_ids = {id(v) for v in local_layer.trainable_weights}
        for v, b, g in zip(variables, before, grads):
            g = np.array(g)
            if id(v) in local_ids:
                expected = b - lr * g / (size if scale else 1)
            else:
                expected = b - lr * hvd.allreduce(g, name=f"ref.{kind}.{v.name}")
            close(v, expected, f"{kind} scale={scale}: {v.name}", atol=1e-5)
    # The callback broadcasts all but the local variables.
    model = make_model(rank)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse")
    local = list(model.layers[0].trainable_weights)
    kept = [np.array(v) for v in local]
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=local[:1])
    callback.register_local_var(local[1])
    model.fit(x, y, batch_size=6, epochs=1, verbose=0, callbacks=[callback])
    root = make_model(0)
    for v, k in zip(local, kept):
        close(v, k, "BroadcastGlobalVariablesCallback overwrote a local variable")
    for v, r in zip(model.layers[1].trainable_weights, root.layers[1].trainable_weights):
        close(v, r, "BroadcastGlobalVariablesCallback did not broadcast a shared variable")


CHECKS = {"sync_batch_norm": run_sync_batch_norm, "local_variables": run_local_variables}
DONE = "keras api OK"


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
