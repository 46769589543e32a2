"""hvdlite.keras.DistributedOptimizer(sharding_stage=1|2) on real ranks, on
the backend KERAS_BACKEND names, in float64 (each check sets Keras' floatx
and, on JAX, 64-bit types for its own run: Note [Float64 per check]): model.fit
with BroadcastGlobalVariablesCallback (ranks start from different weights)
against the unsharded DistributedOptimizer on the same seeds, weights and
whole optimizer state equal to 1e-12, over a model with uneven parameters (a
0-d one, first dimensions not divisible by the ranks and smaller than them).
Compiled and eager steps, SGD with momentum, Adam and AdamW, clipnorm and
global_clipnorm across shards, backward_passes_per_step, fp16 compression,
checkpoints, KerasState, and what is refused, at 2 ranks. check_three_ranks
(a process set of 2, and checkpoints moved between 3 ranks, 2 ranks and an
unsharded optimizer) is keras_sharded_three_ranks.py's, at 3 ranks. Prints
"keras sharded OK". test_keras_backends.py runs it in one job per backend
with the other Keras 3 workers (tests/common/workers/one_job.py)."""
import functools
import os
import sys
import tempfile
from pathlib import Path

import keras
import numpy as np

import hvdlite.keras as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import as_float64, check, close, run_checks  # noqa: E402

BACKEND = keras.backend.backend()
BATCH, STEPS = 4, 21  # per rank; 21 optimizer steps per fit
EXACT = dict(atol=1e-12, rtol=1e-12)


# Note [Float64 per check]
# The equivalences hold to 1e-12, so the checks train in float64. They share
# their process with workers that train in Keras' default float32
# (test_keras_backends.py's one job per backend), so each check sets float64
# for its own run and puts the float32 default back after it, rather than this
# module setting it at import, which would change the other workers' models.
# Both floatx and the dtype policy: Keras makes its global policy from floatx
# when a first layer asks for it and keeps it, so after another worker's
# layers floatx alone would change nothing (fit() checks the weights' dtype).
# JAX keeps 64-bit types off unless enabled (it would make float64 variables
# float32); jax_enable_x64 is part of JAX's jit cache key, so turning it on
# and off between checks is safe.
def in_float64(check_function):
    @functools.wraps(check_function)
    def run(rank, size):
        floatx, policy = keras.config.floatx(), keras.config.dtype_policy()
        x64 = _set_jax_x64(True)
        keras.config.set_floatx("float64")
        keras.config.set_dtype_policy("float64")
        try:
            check_function(rank, size)
        finally:
            keras.config.set_dtype_policy(policy)
            keras.config.set_floatx(floatx)
            _set_jax_x64(x64)
    return run


def _set_jax_x64(enabled):
    """Sets JAX's 64-bit types (on the JAX backend only); returns the old setting."""
    if BACKEND != "jax":
        return None
    import jax
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", enabled)
    return old


class Scale(keras.layers.Layer):
    """A 0-d parameter: one row, owned by rank 0."""

    def build(self, shape):
        self.scale = self.add_weight(shape=(), initializer="ones", name="scale")

    def call(self, x):
        return x * self.scale


def make_model(seed):
    # Kernels of 5 and 3 rows, biases of 3 and 1: not divisible by 2 or 3, and
    # smaller than the ranks.
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(3, activation="tanh"),
                             keras.layers.Dense(1), Scale()])


def data(rank, size, steps=STEPS):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(steps * size * BATCH, 5))
    y = np.sin(x @ rng.normal(size=(5, 1)))
    rows = np.arange(len(x)).reshape(steps, size, BATCH)[:, rank].reshape(-1)
    return x[rows], y[rows]


def fit(rank, size, make_optimizer, stage, run_eagerly=False, process_set=None, **options):
    model = make_model(100 + rank)  # different on every rank: the broadcast makes them equal
    dtypes = {str(w.dtype) for w in model.get_weights()}
    check(dtypes == {"float64"}, f"the model's weights are {dtypes}, not float64")
    if process_set is not None:
        options["process_set"] = process_set
        rank, size = process_set.rank(), process_set.size()
    optimizer = hvd.DistributedOptimizer(make_optimizer(), sharding_stage=stage, **options)
    model.compile(optimizer=optimizer, loss="mse", run_eagerly=run_eagerly)
    x, y = data(rank, size)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if process_set is None else []
    if process_set is not None:  # the broadcast callback is the global set's
        model.set_weights(make_model(100).get_weights())
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    return model, optimizer


def same_state(got, want, what, **tolerance):
    check(sorted(got["state"]) == sorted(want["state"]), f"{what}: parameters differ")
    for name in want["state"]:
        check(sorted(got["state"][name]) == sorted(want["state"][name]),
              f"{what}: state keys of {name}: {sorted(got['state'][name])} vs "
              f"{sorted(want['state'][name])}")
        for key, value in want["state"][name].items():
            close(got["state"][name][key], value, f"{what}: {key} of parameter {name}",
                  **(tolerance or EXACT))
    for key, value in want["extra"]["replicated"].items():
        if key in got["extra"]["replicated"]:
            close(got["extra"]["replicated"][key], value, f"{what}: {key}")


def compare(rank, size, what, make_optimizer, stage, tolerance=EXACT, **options):
    """A sharded fit against the unsharded one: weights and whole state."""
    sharded_model, sharded = fit(rank, size, make_optimizer, stage, **options)
    model, unsharded = fit(rank, size, make_optimizer, 0, **options)
    for i, (got, want) in enumerate(zip(sharded_model.get_weights(), model.get_weights())):
        close(got, want, f"{what}: weight {i}", **tolerance)
    same_state(sharded.consolidated_state_dict(),
               hvd.unsharded_state_dict(unsharded, model.trainable_variables), what, **tolerance)
    check(int(as_float64(sharded.iterations)) == int(as_float64(unsharded.iterations)),
          f"{what}: iterations {sharded.iterations} vs {unsharded.iterations}")
    return sharded_model, sharded


def check_training_matches_unsharded(rank, size):
    stage1, _ = compare(rank, size, "SGD momentum, stage 1, clipnorm",
                        lambda: keras.optimizers.SGD(0.1, momentum=0.9, clipnorm=0.02), 1)
    stage2, _ = compare(rank, size, "Adam, stage 2, eager", lambda: keras.optimizers.Adam(0.01),
                        2, run_eagerly=True)
    if BACKEND == "torch":
        # Stage 2 lets go of the full gradients once their reducescatters are queued.
        check(all(v.value.grad is not None for v in stage1.trainable_variables),
              "stage 1: the parameters lost their gradients")
        check(all(v.value.grad is None for v in stage2.trainable_variables),
              "stage 2: a parameter still holds its full gradient after the step")
    compare(rank, size, "AdamW, stage 1, global_clipnorm",
            lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1, global_clipnorm=0.05), 1)
    compare(rank, size, "Adam, stage 2, backward_passes_per_step=3",
            lambda: keras.optimizers.Adam(0.01), 2, backward_passes_per_step=3)
    # fp16 on the wire both ways; the rounding of the sums may differ.
    compare(rank, size, "SGD, stage 1, fp16", lambda: keras.optimizers.SGD(0.1, momentum=0.5),
            1, tolerance=dict(atol=1e-3, rtol=1e-3), compression=hvd.Compression.fp16)


def check_state_is_a_shard(rank, size):
    model, optimizer = fit(rank, size, lambda: keras.optimizers.Adam(0.01), 1)
    layout_rows = {0: 5, 1: 3, 2: 3, 3: 1, 4: 1}  # kernel, bias, kernel, bias, 0-d scale
    mine = optimizer.state_dict()["state"]
    for index, rows in layout_rows.items():
        want = rows // size + (1 if rank < rows % size else 0)
        got = mine[str(index)]["momentum"].shape[0]
        check(got == want, f"rank {rank} holds {got} rows of parameter {index}'s momentum, "
                           f"want {want}")
    # The broadcast list leaves the rows out; the iteration count is in it.
    names = [v.name for v in optimizer.replicated_variables()]
    check("iteration" in names and not any("momentum" in n for n in names),
          f"replicated variables: {names}")
    # This rank's own shard loads back; a consolidated one too; and shard files.
    saved_shard, whole = optimizer.state_dict(), optimizer.consolidated_state_dict()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"shard{rank}.pkl")
        optimizer.save_shard(path)
        paths = hvd.allgather_object(path)
        for variable in optimizer.variables:
            variable.assign(np.zeros(variable.shape, variable.dtype))
        optimizer.load_shards(paths)
        same_state(optimizer.consolidated_state_dict(), whole, "shard files")
        hvd.allgather_object(None)  # a barrier: nobody deletes a file another rank reads
    optimizer.load_state_dict(saved_shard)
    same_state(optimizer.consolidated_state_dict(), whole, "own shard")
    # KerasState commits the whole state and restores it.
    state = hvd.elastic.KerasState(model)
    state.commit()
    weights = model.get_weights()
    x, y = data(rank, size, steps=2)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    state.restore()
    for got, want in zip(model.get_weights(), weights):
        close(got, want, "KerasState.restore: weights", **EXACT)
    same_state(optimizer.consolidated_state_dict(), whole, "KerasState.restore")
    state.sync()
    same_state(optimizer.consolidated_state_dict(), whole, "KerasState.sync")


def expect_error(what, words, function):
    try:
        function()
    except ValueError as error:
        for word in words:
            check(word in str(error), f"{what}: {word!r} not in the error {error}")
        return
    check(False, f"{what}: no ValueError")


def check_refusals(rank, size):
    expect_error("Lamb", ["Lamb cannot be sharded", "trust ratio"],
                 lambda: hvd.DistributedOptimizer(keras.optimizers.Lamb(), sharding_stage=1))
    expect_error("PowerSGD", ["PowerSGD", "low-rank"], lambda: hvd.DistributedOptimizer(
        keras.optimizers.SGD(), sharding_stage=2, compression=hvd.Compression.powersgd(rank=1)))
    expect_error("stage 3", ["sharding_stage must be 0"],
                 lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), sharding_stage=3))
    # Ranks that build the optimizer on different parameters: every rank is told.
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3 + (rank == 1))])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(), sharding_stage=1)
    expect_error("different parameters", ["on rank 0 but", "on rank 1", "same parameters"],
                 lambda: optimizer.build(model.trainable_variables))
    if BACKEND == "tensorflow":
        import tf_keras
        expect_error("tf_keras", ["needs a Keras 3 optimizer"], lambda: hvd.DistributedOptimizer(
            tf_keras.optimizers.SGD(), sharding_stage=1))


def check_three_ranks(rank, size):
    """3 ranks: the main equivalence, a process set of 2, and checkpoints
    across 3 ranks, 2 ranks and an unsharded optimizer."""
    compare(rank, size, "Adam, stage 1, 3 ranks", lambda: keras.optimizers.Adam(0.01), 1)
    model3, sharded3 = fit(rank, size, lambda: keras.optimizers.Adam(0.01), 2)
    whole = sharded3.consolidated_state_dict()
    pair = hvd.add_process_set([0, 1])
    if rank < 2:
        # Sharded over 2 ranks, the reference unsharded over the same 2.
        model, sharded = fit(rank, size, lambda: keras.optimizers.Adam(0.01), 1, process_set=pair)
        reference, unsharded = fit(rank, size, lambda: keras.optimizers.Adam(0.01), 0,
                                   process_set=pair)
        for got, want in zip(model.get_weights(), reference.get_weights()):
            close(got, want, "process set of 2: weights", **EXACT)
        # The 3 ranks' state loads at 2 ranks, and into an unsharded
        # optimizer; the three continue alike.
        sharded.load_state_dict(whole)
        same_state(sharded.consolidated_state_dict(), whole, "3 ranks -> 2 ranks")
        plain = keras.optimizers.Adam(0.01)
        hvd.load_unsharded_state_dict(plain, reference.trainable_variables, whole)
        same_state(hvd.unsharded_state_dict(plain, reference.trainable_variables), whole,
                   "3 ranks -> unsharded")
        weights = model3.get_weights()
        model.set_weights(weights)
        reference.set_weights(weights)
        rng = np.random.default_rng(11)
        for step in range(3):
            grads = [rng.normal(size=v.shape) for v in model.trainable_variables]
            mine = [g * (1 + rank) for g in grads]  # the ranks' average is 1.5 x grads
            sharded.apply_gradients(zip([keras.ops.convert_to_tensor(g) for g in mine],
                                        model.trainable_variables))
            plain.apply_gradients(zip([keras.ops.convert_to_tensor(1.5 * g) for g in grads],
                                      reference.trainable_variables))
        for got, want in zip(model.get_weights(), reference.get_weights()):
            close(got, want, "continued at 2 ranks vs unsharded", **EXACT)
        back = hvd.unsharded_state_dict(plain, reference.trainable_variables)
    else:
        back = None
    # ... and an unsharded state loads back at 3 ranks.
    back = hvd.broadcast_object(back, 0)
    sharded3.load_state_dict(back)
    same_state(sharded3.consolidated_state_dict(), back, "unsharded -> 3 ranks")


# At 2 ranks; check_three_ranks is keras_sharded_three_ranks.py's.
CHECKS = [in_float64(c) for c in (check_training_matches_unsharded, check_state_is_a_shard,
                                  check_refusals)]
DONE = "keras sharded OK"


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
