"""The Keras 3 cases of tests/gpu/device_check.sh on ONE real NVIDIA GPU, one
per argv[1] (RANKS says how many ranks each needs; device_check.sh starts
them with `python -m hvdlite.runner -np N python keras_cases.py CASE`, and
reports them skipped where Keras does not import: its --wheels DIR).

  keras_jax    KERAS_BACKEND=jax: model.fit with hvdlite.keras'
               DistributedOptimizer and the usual callbacks
               (BroadcastGlobalVariablesCallback, MetricAverageCallback)
               moves the weights as the same fit without hvdlite; summing
               two backward passes (Horovod's default: a postscale of 2)
               moves them as Keras' own accumulation at twice the learning
               rate; an epoch with and without hvdlite, timed (meant to be
               within 5 %).
  keras_torch  the same on KERAS_BACKEND=torch.

At world size 1 hvdlite.keras reduces nothing, as Horovod (Note in
reducing_at_size_one()), so the fits that must reduce pretend to belong to
an elastic job; the summed passes reduce anyway. Each case prints
`DEVICE_CHECK_RESULT {json}` lines and `<case> OK` last.
"""
import contextlib
import os
import sys
import time

CASE = sys.argv[1] if len(sys.argv) > 1 else ""

# How many ranks each case runs on (device_check.sh's list must agree;
# tests/gpu/test_device_check.py checks that it does).
RANKS = {"keras_jax": 1, "keras_torch": 1}


def _case_environment(case):
    """Set before Keras picks its backend, so that a case run by hand behaves
    as under device_check.sh."""
    backend = case.partition("_")[2]
    return {"KERAS_BACKEND": backend, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"} if backend else {}


os.environ.update(_case_environment(CASE))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.keras as hvd  # noqa: E402

import device_check_helpers as helpers  # noqa: E402
from device_check_helpers import close, median_ms, result  # noqa: E402

helpers.check_build_under_test(hvdlite)
BACKEND = keras.backend.backend()
# Full float32 matmuls in both fits (TF32 rounding would hide small errors).
if BACKEND == "jax":
    import jax
    jax.config.update("jax_default_matmul_precision", "highest")
elif BACKEND == "torch":
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False

FEATURES, HIDDEN, OUTPUTS = 256, 512, 16
BATCH, STEPS = 128, 64  # per epoch


def dataset():
    rng = np.random.default_rng(7)
    n = BATCH * STEPS
    return (rng.normal(size=(n, FEATURES)).astype("float32"),
            rng.normal(size=(n, OUTPUTS)).astype("float32"))


def make_model():
    keras.utils.set_random_seed(0)  # the same initial weights in every fit
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(HIDDEN, activation="relu"),
                             keras.layers.Dense(HIDDEN, activation="relu"),
                             keras.layers.Dense(OUTPUTS)])


def sgd(learning_rate, **options):
    return keras.optimizers.SGD(learning_rate, momentum=0.9, **options)  # linear in the gradient


class EpochTimes(keras.callbacks.Callback):
    """ms per epoch (the logs are read back at its end, so the GPU is done)."""

    def __init__(self):
        super().__init__()
        self.ms = []

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.ms.append((time.perf_counter() - self.started) * 1e3)


@contextlib.contextmanager
def reducing_at_size_one():
    """hvdlite.keras' optimizer reduces nothing at world size 1 (as Horovod)
    unless an elastic job may add ranks (HVDLITE_ELASTIC=1, read when a step
    is traced or run; init() has read it already): pretend it may, so that
    the gradients go through hvdlite's collectives on the GPU."""
    os.environ["HVDLITE_ELASTIC"] = "1"
    try:
        yield
    finally:
        del os.environ["HVDLITE_ELASTIC"]


def fit(optimizer, epochs, extra_callbacks=()):
    """(initial weights, final weights, ms per epoch) of one fit on the dataset."""
    x, y = dataset()
    model = make_model()
    start = model.get_weights()
    model.compile(optimizer=optimizer, loss="mse", metrics=["mae"])
    timer = EpochTimes()
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
              callbacks=[*extra_callbacks, timer])
    where = weights_device(model)
    assert ("gpu" in where or "cuda" in where), f"Keras trained on {where}, not on the GPU"
    return start, model.get_weights(), timer.ms


def weights_device(model):
    value = model.weights[0].value
    if BACKEND == "jax":
        return ",".join(str(d) for d in value.devices()).lower()
    return str(value.device)


def same_moves(what, got, want, start, rtol=1e-3):
    """Each weight moved from `start` as in the reference, within rtol of the
    reference's largest move (float32 rounding differs between the two)."""
    for i, (g, w, s) in enumerate(zip(got, want, start)):
        moved_got, moved_want = g.astype(np.float64) - s, w.astype(np.float64) - s
        reach = float(np.abs(moved_want).max())
        assert reach > 0, f"{what}: weight {i} did not move in the reference"
        close(f"{what}: weight {i} moved", moved_got, moved_want, rtol=0, atol=rtol * reach)


def keras_fit():
    """The body of both cases: the backend is the process's."""
    started = time.monotonic()
    epochs = 5  # the first compiles: timed from the second on
    start, plain, plain_ms = fit(sgd(0.05), epochs)
    with reducing_at_size_one():
        _, distributed, hvdlite_ms = fit(hvd.DistributedOptimizer(sgd(0.05)), epochs, callbacks())
    same_moves("fit with DistributedOptimizer vs without hvdlite", distributed, plain, start)
    # Two passes summed: the reducer postscales by 2, so it reduces at size 1 too.
    _, summed, _ = fit(hvd.DistributedOptimizer(sgd(0.05), backward_passes_per_step=2), 2, callbacks())
    _, accumulated, _ = fit(sgd(0.1, gradient_accumulation_steps=2), 2)
    same_moves("backward_passes_per_step=2 (summed) vs Keras' accumulation at 2x lr", summed,
               accumulated, start)
    plain_epoch, hvdlite_epoch = median_ms(plain_ms[1:]), median_ms(hvdlite_ms[1:])
    ratio = round(hvdlite_epoch / plain_epoch, 3)
    numbers = dict(checks=helpers.checks, seconds=round(time.monotonic() - started, 1), backend=BACKEND,
                   keras=keras.__version__, epoch_ms_without_hvdlite=plain_epoch,
                   epoch_ms_with_hvdlite=hvdlite_epoch, ratio=ratio, steps_per_epoch=STEPS,
                   target_ratio=1.05, meets_target=ratio <= 1.05)
    if BACKEND == "jax":
        import hvdlite.jax
        numbers["jit_path"] = hvdlite.jax.jit_path()
    result(**numbers)
    print(f"an epoch of {STEPS} steps on {BACKEND}: {plain_epoch} ms without hvdlite, "
          f"{hvdlite_epoch} ms with DistributedOptimizer (x{ratio}, target x1.05)", flush=True)


def callbacks():
    """Horovod's usual two, new for each fit (a broadcast callback acts once)."""
    return [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]


def keras_jax():
    keras_fit()


def keras_torch():
    keras_fit()

if __name__ == "__main__":
    if CASE in RANKS and BACKEND != CASE.partition("_")[2]:
        raise SystemExit(f"case {CASE} runs Keras on {CASE.partition('_')[2]}, but Keras chose "
                         f"{BACKEND!r} (KERAS_BACKEND={os.environ.get('KERAS_BACKEND')!r})")
    helpers.run_case(CASE, RANKS, {"keras_jax": keras_jax, "keras_torch": keras_torch}, hvd)
