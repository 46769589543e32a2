"""One rank of a 2-rank job on an hvdlite installed from a wheel
(tests/wheel/test_wheel.py): for each binding named on the command line, a
collective whose answer is checked against the value computed here, on the
path that needs the wheel's prebuilt libraries (TensorFlow ops in eager and
tf.function, the XLA FFI handler inside jax.jit, model.fit on Keras 3).
Prints "<binding> OK" per binding, then "wheel job OK"; and what was loaded
("loaded: ..." lines), which the callers judge.

Bindings: numpy, torch, tensorflow, keras (on KERAS_BACKEND's backend), jax.
"""
import os
import sys

import numpy as np

import hvdlite

VENV = os.environ["HVDLITE_TEST_WHEEL_VENV"]
assert hvdlite.__file__.startswith(VENV), f"hvdlite imported from {hvdlite.__file__}, not {VENV}"


def expected_sum(size):
    """Rank r contributes (r + 1) * [0, 1, 2, 3]."""
    return np.arange(4.0) * sum(r + 1 for r in range(size))


def check_close(binding, got, want):
    got = np.asarray(got, dtype=np.float64)
    if not np.allclose(got, want, rtol=1e-6, atol=1e-6):
        raise AssertionError(f"{binding}: got {got.tolist()}, expected {np.asarray(want).tolist()}")


def run_numpy():
    import hvdlite.numpy as hvd
    hvd.init()
    check_close("numpy", hvd.allreduce(np.arange(4.0) * (hvd.rank() + 1), op=hvd.Sum),
                expected_sum(hvd.size()))


def run_torch():
    import torch
    import hvdlite.torch as hvd
    hvd.init()
    mine = torch.arange(4, dtype=torch.float32) * (hvd.rank() + 1)
    check_close("torch", hvd.allreduce(mine, op=hvd.Sum).numpy(), expected_sum(hvd.size()))
    check_close("torch average", hvd.allreduce(mine).numpy(), expected_sum(hvd.size()) / hvd.size())


def run_tensorflow():
    import tensorflow as tf
    import hvdlite.tensorflow as hvd
    from hvdlite.tensorflow import op_library
    hvd.init()
    mine = tf.range(4, dtype=tf.float32) * float(hvd.rank() + 1)
    check_close("tensorflow eager", hvd.allreduce(mine, op=hvd.Sum), expected_sum(hvd.size()))
    graph = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum, name="in_graph"))
    check_close("tensorflow tf.function", graph(mine), expected_sum(hvd.size()))
    print(f"loaded: tensorflow {tf.__version__} ops {where(op_library.library_path())}")


def where(path):
    """A library's path from hvdlite's package folder on ("prebuilt/..."), or
    "compiled <name>" for one in the cache of compiled code."""
    parts = path.split("/hvdlite/prebuilt/")
    return "prebuilt/" + parts[1] if len(parts) == 2 else "compiled " + os.path.basename(path)


def linear_data(rank):
    """Rank r's batch of 4 rows for y = x @ [1, -2]."""
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2) / 8.0 + rank
    return x, x @ np.array([[1.0], [-2.0]], dtype=np.float32)


def run_keras():
    """One model.fit step of SGD on a linear model from zero weights, with
    each rank's own batch: the weights after it are the step on the gradient
    averaged over the ranks, computed here."""
    import keras
    import hvdlite.keras as hvd
    hvd.init()
    model = keras.Sequential([keras.Input((2,)),
                              keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    x, y = linear_data(hvd.rank())
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    # MSE's gradient at w = 0: -2/B x^T y, averaged over the ranks.
    gradients = [-2.0 / 4 * xr.T @ yr for xr, yr in (linear_data(r) for r in range(hvd.size()))]
    want = -0.1 * np.mean(gradients, axis=0)
    check_close(f"keras ({keras.backend.backend()})",
                keras.ops.convert_to_numpy(model.layers[0].kernel).ravel(), want.ravel())
    if keras.backend.backend() == "jax":
        from hvdlite.jax import ffi
        print(f"loaded: keras {keras.__version__} jax step {ffi.jit_path()}")


def run_jax():
    import jax
    import jax.numpy as jnp
    import hvdlite.jax as hvd
    from hvdlite.jax import ffi
    hvd.init()
    step = jax.jit(lambda x: hvd.allreduce(x, op=hvd.Sum, name="in_jit") * 1.0)
    check_close("jax jit", step(jnp.arange(4.0) * (hvd.rank() + 1)), expected_sum(hvd.size()))
    import jaxlib
    path = ffi.jit_path()
    library = f" {where(ffi.library_path())}" if path == ffi.FFI else ""
    print(f"loaded: jaxlib {jaxlib.__version__} jit {path}{library}")


RUNS = {"numpy": run_numpy, "torch": run_torch, "tensorflow": run_tensorflow, "keras": run_keras,
        "jax": run_jax}

if __name__ == "__main__":
    for binding in sys.argv[1:]:
        RUNS[binding]()
        print(f"{binding} OK", flush=True)
    print("wheel job OK", flush=True)
