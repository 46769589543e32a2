"""Compression on TensorFlow on every rank (common/compression.py's casts):
what each compressor puts on the wire, allreduce and DistributedGradientTape
with fp16 and bf16 against float64 references within each type's precision,
DistributedGradientTape with PowerSGD at full rank (exactly the average),
and hvdlite.keras fitting with Compression.bf16 and PowerSGD on TensorFlow's Keras (Keras 3,
or Keras 2 when the test sets TF_USE_LEGACY_KERAS=1).
Exits non-zero with a message on the first mismatch. Also a worker of
tests/common/workers/one_job.py (CHECKS, DONE): test_tf_jobs.py's 2-rank job."""
import sys

import numpy as np
import tensorflow as tf

tf.get_logger().setLevel("ERROR")

import hvdlite.tensorflow as hvd
from tf_checks import check, close

# Relative precision of each wire type (half an ulp is 2^-11 for fp16, 2^-8 for bf16),
# with room for one rounding per input and one for the sum.
TOLERANCE = {"fp16": 4e-3, "bf16": 3e-2}
WIRE = {"fp16": tf.float16, "bf16": tf.bfloat16}


def inputs(rank):
    # Not representable in either half type, so a cast changes them.
    return np.linspace(0.1, 3.3, 12).reshape(3, 4) * (rank + 1) + 1 / 3


def check_compressors(rank, size):
    for name, wire in WIRE.items():
        compressor = getattr(hvd.Compression, name)
        sent, ctx = compressor.compress(tf.constant(inputs(0), tf.float32))
        check(sent.dtype == wire, f"Compression.{name} sends {sent.dtype}, expected {wire}")
        back = compressor.decompress(sent, ctx)
        check(back.dtype == tf.float32, f"Compression.{name} gives back {back.dtype}")
        ints, ctx = compressor.compress(tf.constant([1, 2], tf.int32))
        check(ints.dtype == tf.int32 and ctx is None,
              f"Compression.{name} cast an int32 tensor to {ints.dtype}")
    sent, ctx = hvd.Compression.none.compress(tf.constant([1.5]))
    check(sent.dtype == tf.float32 and ctx is None, "Compression.none changed the tensor")


def check_allreduce(rank, size):
    expected = sum(inputs(r) for r in range(size)) / size
    exact = hvd.allreduce(tf.constant(inputs(rank), tf.float32), name="exact")
    for name in WIRE:
        compression = getattr(hvd.Compression, name)
        for mode, run in [("eager", lambda t, n: hvd.allreduce(t, name=n, compression=compression)),
                          ("tf.function", tf.function(
                              lambda t, n: hvd.allreduce(t, name=n, compression=compression)))]:
            got = run(tf.constant(inputs(rank), tf.float32), f"{name}.{mode}")
            check(got.dtype == tf.float32, f"allreduce {name} {mode} returned {got.dtype}")
            check(np.allclose(got.numpy(), expected, rtol=TOLERANCE[name], atol=0),
                  f"allreduce compression={name} {mode}: {got.numpy()} vs {expected}")
            # The half type was on the wire: the result lost float32's precision.
            check(not np.array_equal(got.numpy(), exact.numpy()),
                  f"allreduce compression={name} {mode} equals the uncompressed result")


def check_tape(rank, size):
    w = tf.Variable(np.ones((4, 1), np.float32))
    x = tf.constant(inputs(rank), tf.float32)
    expected = sum(inputs(r).sum(axis=0) for r in range(size)).reshape(4, 1) / size
    for name in WIRE:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(x, w))  # d/dw = column sums of x
        tape = hvd.DistributedGradientTape(tape, compression=getattr(hvd.Compression, name))
        grad = tape.gradient(loss, w)
        check(grad.dtype == tf.float32, f"tape compression={name} gradient is {grad.dtype}")
        check(np.allclose(grad.numpy(), expected, rtol=TOLERANCE[name], atol=0),
              f"DistributedGradientTape compression={name}: {grad.numpy()} vs {expected}")


def check_powersgd_tape(rank, size):
    # PowerSGD (hvdlite/tensorflow/powersgd.py) at full rank is the average
    # itself, eagerly and from the stateful numpy_function inside tf.function.
    w = tf.Variable(np.ones((4, 3), np.float32), name="psgd_w")
    b = tf.Variable(np.zeros(3, np.float32), name="psgd_b")
    x = tf.constant(inputs(rank), tf.float32)
    expected_w = sum(inputs(r).T @ np.ones((3, 3)) for r in range(size)) / size
    expected_b = np.full(3, 3.0)
    compression = hvd.Compression.powersgd(rank=3, start_iter=1, min_compression_rate=0.0)

    def gradients():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(x, w) + b)
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        return tape.gradient(loss, [w, b])

    for mode, run in [("eager", gradients), ("eager", gradients),
                      ("tf.function", tf.function(gradients))]:
        grad_w, grad_b = run()
        close(grad_w.numpy(), expected_w, f"DistributedGradientTape PowerSGD {mode} (w)",
              atol=1e-3)
        close(grad_b.numpy(), expected_b, f"DistributedGradientTape PowerSGD {mode} (b)")
    check(compression.iter == 3 and set(compression.errors) == {"psgd_w_0"},
          f"PowerSGD counted {compression.iter} steps, error memory of {sorted(compression.errors)}")


def check_keras_fit(rank, size):
    keras = tf.keras  # Keras 3, or tf_keras (Keras 2) under TF_USE_LEGACY_KERAS=1
    import hvdlite.keras as hvd_keras
    check(keras.backend.backend() == "tensorflow", f"Keras backend {keras.backend.backend()}")
    print(f"keras {keras.__name__}", flush=True)
    sent, _ = hvd_keras.Compression.bf16.compress(tf.ones([2]))
    check(sent.dtype == tf.bfloat16, f"hvdlite.keras Compression.bf16 sends {sent.dtype}")
    rng = np.random.default_rng(42)
    x = rng.normal(size=(size * 16, 5)).astype("float32")
    y = rng.normal(size=(size * 16, 1)).astype("float32")

    def model(optimizer, seed=0):
        keras.utils.set_random_seed(seed)
        m = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"),
                              keras.layers.Dense(1)])
        m.compile(optimizer=optimizer, loss="mse")
        return m

    distributed = model(hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                       compression=hvd_keras.Compression.bf16))
    rows = x.reshape(4, size, 4, 5)[:, rank].reshape(-1, 5)  # batch k of every rank = global k
    targets = y.reshape(4, size, 4, 1)[:, rank].reshape(-1, 1)
    distributed.fit(rows, targets, batch_size=4, epochs=1, shuffle=False, verbose=0)
    reference = model(keras.optimizers.SGD(0.1))
    reference.fit(x, y, batch_size=4 * size, epochs=1, shuffle=False, verbose=0)
    for got, want in zip(distributed.get_weights(), reference.get_weights()):
        close(got, want, "Keras fit compression=bf16 vs single process", atol=1e-2)
    # PowerSGD at full rank: the average itself, so the single process's weights.
    powersgd = hvd_keras.Compression.powersgd(rank=4, start_iter=1, min_compression_rate=0.0)
    distributed = model(hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                       compression=powersgd))
    distributed.fit(rows, targets, batch_size=4, epochs=1, shuffle=False, verbose=0)
    check(powersgd.iter == 4 and len(powersgd.errors) == 2,  # both kernels
          f"Keras fit PowerSGD: {powersgd.iter} steps, error memory {sorted(powersgd.errors)}")
    for got, want in zip(distributed.get_weights(), reference.get_weights()):
        close(got, want, "Keras fit full-rank PowerSGD vs single process", atol=1e-5)


CHECKS = [check_compressors, check_allreduce, check_tape, check_powersgd_tape, check_keras_fit]
DONE = "compression OK"


def main():
    hvd.init()
    for check_function in CHECKS:
        if check_function is not check_keras_fit or "keras" in sys.argv[1:]:
            check_function(hvd.rank(), hvd.size())
    print(DONE, flush=True)


if __name__ == "__main__":
    main()
