"""hvdlite.tensorflow's part of the desync scenarios
(tests/common/workers/desync_scenarios.py), eagerly and inside tf.function
(whose call sites are where the ops were traced, AutoGraph's generated code
mapped back to these lines), in one job: TF's import is slow. With "keras"
on the command line, Keras' scenarios (tests/keras/workers/desync_keras.py,
model.fit on the TensorFlow backend) run after them in the same job."""
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

import hvdlite.tensorflow as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from desync_scenarios import SCENARIOS, run  # noqa: E402


def step(x):
    return hvd.allreduce(x, name="loss")  # SITE:step


def evaluate(x):
    return hvd.allreduce(x, name="val_loss")  # SITE:evaluate


def widths(rank):
    return tf.ones([2 if rank == 0 else 3])


def pair(x, first, second):
    hvd.allreduce(x, name=first)  # SITE:first
    return hvd.allreduce(x, name=second)  # SITE:second


def steps(x, rank):
    for i in range(3):
        if rank == 1 and i == 1:
            continue
        hvd.allreduce(x, name="step")  # SITE:skip_step
    return hvd.allreduce(x, name="final")  # SITE:skip_final


class Eager:
    def mismatch(self, rank):
        hvd.allreduce(widths(rank), name="w")  # SITE:mismatch

    def branches(self, rank):
        step(tf.ones(4)) if rank == 0 else evaluate(tf.ones(4))

    def reorder(self, rank):
        pair(tf.ones(4), *(("a", "b") if rank == 0 else ("b", "a")))

    def skip(self, rank):
        steps(tf.ones(4), rank)


class Function:
    """The same, each traced into a tf.function (AutoGraph on)."""

    def mismatch(self, rank):
        tf.function(lambda x: hvd.allreduce(x, name="w"))(widths(rank))  # SITE:mismatch_function

    def branches(self, rank):
        tf.function(step if rank == 0 else evaluate)(tf.ones(4))

    def reorder(self, rank):
        names = ("a", "b") if rank == 0 else ("b", "a")
        tf.function(lambda x: pair(x, *names))(tf.ones(4))

    def skip(self, rank):
        tf.function(lambda x: steps(x, rank))(tf.ones(4))


if __name__ == "__main__":
    tf.get_logger().setLevel("ERROR")
    hvd.init()

    def sync(name):
        hvd.allreduce(np.zeros(1, np.float32), name=name)
    scenarios = [a for a in sys.argv[1:] if a != "keras"] or SCENARIOS
    run(hvd.rank(), Eager(), sync, scenarios, prefix="eager.")
    run(hvd.rank(), Function(), sync, scenarios, prefix="function.")
    if "keras" in sys.argv[1:]:
        sys.path.insert(0, str(Path(__file__).parents[2] / "keras" / "workers"))
        from desync_keras import Fit
        run(hvd.rank(), Fit(), sync, scenarios)
    hvd.shutdown()
