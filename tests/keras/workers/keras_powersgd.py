"""hvdlite.keras' PowerSGD compression on real ranks, on the backend that
KERAS_BACKEND names (TensorFlow and JAX: NumPy on the host, crossed into from
the compiled train step; torch: hvdlite.torch's, on the gradients' device):
exact at full rank, the compiled step equal to the eager one, only update
steps reducing under gradient accumulation, training that converges to the
uncompressed result, state that KerasState restores and syncs, and the
misuses it refuses. Prints "keras powersgd OK" on every rank."""
import sys
from pathlib import Path

import keras
import numpy as np

import hvdlite.keras as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import as_float64, check, close, run_checks  # noqa: E402
from fit_data import same_on_every_rank  # noqa: E402

BACKEND = keras.backend.backend()
BATCH, BATCHES = 8, 6  # per rank, per epoch


def grads_of(step, r, shapes):
    """Rank r's gradients at `step`; any rank can make them."""
    rng = np.random.default_rng(1000 * step + r)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


def check_full_rank_is_exact(rank, size):
    # rank >= min(n, m) and every matrix compressed: P Q^T is the average itself.
    shapes = [(16, 12), (12,)]
    variables = [keras.Variable(np.zeros(s, np.float32), name=f"full_{i}")
                 for i, s in enumerate(shapes)]
    compression = hvd.Compression.powersgd(rank=12, start_iter=1, min_compression_rate=0.0)
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), compression=compression)
    before = [np.zeros(s, np.float32) for s in shapes]
    for step in range(3):
        grads = [keras.ops.convert_to_tensor(g) for g in grads_of(step, rank, shapes)]
        optimizer.apply_gradients(zip(grads, variables))
        now = [as_float64(v.value) for v in variables]
        for i, shape in enumerate(shapes):
            want = np.mean([grads_of(step, r, shapes)[i] for r in range(size)], axis=0)
            close(before[i] - now[i], want, f"full rank, step {step}, variable {i}",
                  rtol=1e-4, atol=1e-5)
        before = now
    check(compression.iter == 3, f"full rank: {compression.iter} steps counted, want 3")
    check(set(compression.errors) == {"full_0"},
          f"full rank: error memory of {sorted(compression.errors)}, want only full_0's")


def make_model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(4)])


def data(rank, epochs_of_batches=BATCHES):
    """This rank's rows of a learnable problem: y = tanh(x A) B."""
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(8, 16)), rng.normal(size=(16, 4))
    rng = np.random.default_rng(100 + rank)
    x = rng.normal(size=(epochs_of_batches * BATCH, 8)).astype(np.float32)
    return x, (np.tanh(x @ a) @ b / 4).astype(np.float32)


def fit(rank, compression, epochs=1, run_eagerly=False, passes=1, learning_rate=0.1):
    model = make_model()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(learning_rate, momentum=0.5),
                                         compression=compression,
                                         backward_passes_per_step=passes)
    model.compile(optimizer=optimizer, loss="mse", run_eagerly=run_eagerly)
    x, y = data(rank)
    history = model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)
    return model, history.history["loss"][-1]


def check_compiled_step_matches_eager(rank, size):
    # The first Dense kernel (8 x 16) is compressed at rank 2, the rest go plain.
    weights = {}
    for eager in (False, True):
        compression = hvd.Compression.powersgd(rank=2, start_iter=2)
        model, _ = fit(rank, compression, run_eagerly=eager)
        check(compression.iter == BATCHES, f"eager={eager}: {compression.iter} steps, want "
                                           f"{BATCHES}")
        first_kernel = model.layers[0].kernel.path
        check(set(compression.errors) == {first_kernel},
              f"eager={eager}: error memory of {sorted(compression.errors)}, want only "
              f"{first_kernel!r}'s")
        weights[eager] = model.get_weights()
        same_on_every_rank(weights[eager], f"PowerSGD fit, eager={eager}")
    for i, (compiled, eager) in enumerate(zip(weights[False], weights[True])):
        close(compiled, eager, f"weight {i}: compiled train step against run_eagerly",
              rtol=1e-4, atol=1e-6)


def check_accumulation_reduces_on_update_steps(rank, size):
    # At full rank PowerSGD is exact, so 2 passes per step must train as
    # uncompressed 2 passes do; and only the BATCHES / 2 update steps reduce.
    compression = hvd.Compression.powersgd(rank=16, start_iter=1, min_compression_rate=0.0)
    compressed, _ = fit(rank, compression, passes=2)
    plain, _ = fit(rank, None, passes=2)
    check(compression.iter == BATCHES // 2,
          f"2 passes per step: PowerSGD reduced {compression.iter} times, want {BATCHES // 2}")
    for i, (got, want) in enumerate(zip(compressed.get_weights(), plain.get_weights())):
        close(got, want, f"weight {i}: full-rank PowerSGD, 2 passes, against uncompressed",
              rtol=1e-3, atol=1e-5)


def check_training_converges_like_uncompressed(rank, size):
    _, plain_loss = fit(rank, None, epochs=12)
    _, compressed_loss = fit(rank, hvd.Compression.powersgd(rank=1, start_iter=3), epochs=12)
    _, first_loss = fit(rank, None, epochs=1, learning_rate=0.0)
    check(plain_loss < 0.5 * first_loss, f"uncompressed training did not learn: loss "
                                         f"{first_loss:.4f} -> {plain_loss:.4f}")
    # Measured: 0.2-1.2 % apart on the three backends.
    check(abs(compressed_loss - plain_loss) <= 0.05 * plain_loss,
          f"PowerSGD rank 1 ends at loss {compressed_loss:.5f}, uncompressed at "
          f"{plain_loss:.5f}: more than 5 % apart")


def arrays(state):
    return {k: as_float64(v) for k, v in state.items()}


def check_keras_state_restores_and_syncs(rank, size):
    compression = hvd.Compression.powersgd(rank=1, start_iter=1)
    model, _ = fit(rank, compression)
    state = hvd.elastic.KerasState(model, epoch=0)
    state.save()
    saved = compression.state_dict()
    saved_errors, saved_qs = arrays(saved["errors"]), arrays(saved["qs"])
    x, y = data(rank)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    check(compression.iter == 2 * BATCHES, f"{compression.iter} steps after 2 epochs")
    state.restore()
    check(compression.iter == BATCHES, f"restored to step {compression.iter}, want {BATCHES}")
    for key, want in saved_errors.items():
        close(compression.errors[key], want, f"restored error memory of {key}")
    # sync (after the job re-formed): rank 0's Q's and step count, the ranks'
    # mean error memory (which keeps their sum, all that enters the next step).
    compression.iter += rank
    state.sync()
    check(compression.iter == BATCHES, f"synced step count {compression.iter}, want rank 0's")
    for key, mine in saved_errors.items():
        mean = hvd.allreduce(mine, op=hvd.Average, name=f"mean error {key}")
        close(compression.errors[key], mean, f"synced error memory of {key}")
        close(compression.qs[key], hvd.broadcast(saved_qs[key], 0, name=f"q {key}"),
              f"synced Q of {key}")


def check_refusals(rank, size):
    def refused(what, error_type, words, call):
        try:
            call()
        except error_type as error:
            check(words in str(error), f"{what}: {error!r} does not say {words!r}")
        else:
            check(False, f"{what}: accepted")

    sgd = keras.optimizers.SGD(0.1)
    refused("the class", ValueError, "needs its settings",
            lambda: hvd.DistributedOptimizer(sgd, compression=hvd.Compression.powersgd))
    refused("Adasum", ValueError, "supports op=hvd.Average and hvd.Sum",
            lambda: hvd.DistributedOptimizer(sgd, compression=hvd.Compression.powersgd(),
                                             op=hvd.Adasum))
    shared = hvd.Compression.powersgd(rank=1)
    first = hvd.DistributedOptimizer(sgd, compression=shared)  # noqa: F841 (kept alive)
    refused("shared", ValueError, "already belongs to another DistributedOptimizer",
            lambda: hvd.DistributedOptimizer(sgd, compression=shared))
    refused("per tensor", TypeError, "PowerSGD compresses a whole step",
            lambda: hvd.allreduce(keras.ops.ones((4, 4)), compression=shared, name="psgd.x"))


CHECKS = [check_full_rank_is_exact, check_compiled_step_matches_eager,
          check_accumulation_reduces_on_update_steps, check_training_converges_like_uncompressed,
          check_keras_state_restores_and_syncs, check_refusals]
DONE = "keras powersgd OK"


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
