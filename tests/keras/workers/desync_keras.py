"""hvdlite.keras' part of the desync scenarios (tests/common/workers/desync_scenarios.py),
through model.fit: DistributedOptimizer allreduces the gradients inside
Keras' traced train step, so their call site is the program's fit() line,
not Keras', TensorFlow's or hvdlite's frames."""
import sys
from pathlib import Path

import keras
import numpy as np

import hvdlite.keras as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from desync_scenarios import run  # noqa: E402


def model(width=1):
    # Every rank names its layers alike in every scenario (gradients are
    # named after them), whatever an earlier one left behind.
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(width)])
    m.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    return m


def data(batches=2):
    return np.ones((4 * batches, 3), np.float32), np.ones((4 * batches, 1), np.float32)


class Fit:
    def mismatch(self, rank):
        m = model(width=1 if rank == 0 else 2)
        x, _ = data()
        m.fit(x, np.ones((len(x), m.output_shape[-1]), np.float32), batch_size=4, verbose=0)  # SITE:fit_mismatch

    def branches(self, rank):
        m = model()
        if rank == 0:
            m.fit(*data(), batch_size=4, verbose=0)  # SITE:fit_branch
        else:
            hvd.allreduce(np.ones(2, np.float32), name="val_loss")  # SITE:evaluate

    def reorder(self, rank):
        m = model()
        if rank == 0:
            m.fit(*data(), batch_size=4, verbose=0)  # SITE:fit_first
            hvd.allreduce(np.ones(2, np.float32), name="after")  # SITE:after_second
        else:
            hvd.allreduce(np.ones(2, np.float32), name="after")  # SITE:after_first
            m.fit(*data(), batch_size=4, verbose=0)  # SITE:fit_second

    def skip(self, rank):
        # Rank 1 trains one epoch fewer, then both allreduce a final metric.
        model().fit(*data(), batch_size=4, epochs=2 if rank == 0 else 1, verbose=0)  # SITE:fit_skip
        hvd.allreduce(np.ones(2, np.float32), name="final")  # SITE:skip_final


if __name__ == "__main__":
    hvd.init()
    run(hvd.rank(), Fit(), lambda name: hvd.allreduce(np.zeros(1, np.float32), name=name))
    hvd.shutdown()
