"""The data and model that the Keras fit workers share (fit_and_callbacks.py on
Keras 3, legacy_keras.py on Keras 2's tf_keras): STEPS global batches of
size x PER_RANK_BATCH rows, each rank's shard of them, a small model from a
seed, and the check that every rank holds the same weights. The caller passes
its Keras module, so this one imports neither Keras."""
import numpy as np

import hvdlite.keras as hvd
from checks import check

PER_RANK_BATCH = 4
STEPS = 4  # batches per epoch on each rank


def make_model(keras, seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


def dataset(size):
    rng = np.random.default_rng(42)
    n = size * PER_RANK_BATCH * STEPS
    return rng.normal(size=(n, 5)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")


def shard(array, rank, size):
    """This rank's rows, such that batch k of every rank together is global batch k."""
    batches = array.reshape(STEPS, size, PER_RANK_BATCH, *array.shape[1:])
    return batches[:, rank].reshape(-1, *array.shape[1:])


def same_on_every_rank(weights, what):
    for i, w in enumerate(weights):
        spread = hvd.allreduce(w, op=hvd.Max) - hvd.allreduce(w, op=hvd.Min)
        check(np.abs(spread).max() == 0, f"{what}: weight {i} differs across ranks")
