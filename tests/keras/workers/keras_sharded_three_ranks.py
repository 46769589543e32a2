"""keras_sharded.py's check at 3 ranks (check_three_ranks: the main
equivalence, a process set of 2, and checkpoints moved between 3 ranks, 2
ranks and an unsharded optimizer) as a worker of its own, so that a job of
tests/common/workers/one_job.py, which runs every check of each worker it is
given, can run it beside other 3-rank workers (test_keras_api.py's Keras 3
job). Prints "keras sharded OK"."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
import keras_sharded  # noqa: E402
from checks import run_checks  # noqa: E402

hvd = keras_sharded.hvd
CHECKS = [keras_sharded.in_float64(keras_sharded.check_three_ranks)]
DONE = keras_sharded.DONE


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
