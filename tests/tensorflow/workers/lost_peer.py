"""Rank 1 dies in the middle of training; rank 0's TF collectives must fail
fast, naming it: inside tf.function as tf.errors.InternalError
(killed_rank_scenario.py), eagerly as HvdliteInternalError (a RuntimeError).
No hang."""
import sys
from pathlib import Path

import tensorflow as tf

import hvdlite.tensorflow as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from killed_rank_scenario import ignore_launcher_stop, run_until_failure  # noqa: E402
from killed_rank_scenario import expect_work_refused  # noqa: E402


def main():
    ignore_launcher_stop()
    hvd.init()
    rank = hvd.rank()
    step_fn = tf.function(lambda x: hvd.allreduce(x, name="lost_peer.step"))
    error = run_until_failure(rank, lambda step: step_fn(tf.ones([1000])),
                              tf.errors.InternalError, kill_at=10,
                              message=lambda error: error.message)
    if error is None:
        sys.exit(0)
    expect_work_refused(rank, "eager", lambda: hvd.allreduce(tf.ones([2]), name="after.loss"),
                        hvd, "HvdliteInternalError")


if __name__ == "__main__":
    main()
