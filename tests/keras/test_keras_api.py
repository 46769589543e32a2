"""hvdlite.keras on real ranks: SyncBatchNormalization vs one BatchNormalization
on the concatenated batch, local variables (PartialDistributedOptimizer,
register_local_var, the broadcast callback), the sharded optimizer at 3 ranks
(DistributedOptimizer(sharding_stage=1|2): a process set of 2, checkpoints
across 3 ranks, 2 ranks and an unsharded optimizer; its 2-rank checks run in
test_keras_backends.py), and Keras 2 (tf_keras with TF_USE_LEGACY_KERAS=1):
fit, callbacks, backward_passes_per_step, load_model, and Horovod's Keras 2
optimizer surface (_compute_gradients, _agg_helper, aggregation in
tf.function, PartialDistributedOptimizer) on both kinds of tf_keras optimizer."""
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tensorflow_ops,
              pytest.mark.timeout(600)]  # the first test of a job waits for it

WORKERS = Path(__file__).parent / "workers"
ONE_JOB = Path(__file__).parents[1] / "common" / "workers" / "one_job.py"
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
LEGACY_ENV = dict(ENV, TF_USE_LEGACY_KERAS="1")


# One world size (starting TensorFlow ranks is most of the cost): 3 (an odd
# size catches averaging mistakes), and one job per Keras (a process imports
# Keras 3 or Keras 2, not both), each running several workers
# (tests/common/workers/one_job.py; each prints its own line).
@pytest.fixture(scope="module")
def keras3_job():
    """The finished 3-rank Keras 3 (TensorFlow backend) job of
    workers/sync_bn_and_local.py and workers/keras_sharded_three_ranks.py
    (each of whose checks sets float64 for its own run). The sharded worker
    runs last: ranks 0 and 1 build more models than rank 2, so Keras' layer
    names, of which SyncBatchNormalization's collectives are named, would
    differ between the ranks after it."""
    from conftest import run_ranks
    return run_ranks(3, ONE_JOB, WORKERS / "sync_bn_and_local.py",
                     WORKERS / "keras_sharded_three_ranks.py", timeout=540,
                     env=dict(ENV, KERAS_BACKEND="tensorflow"))


@pytest.fixture(scope="module")
def keras2_job():
    """The finished 3-rank Keras 2 job of workers/legacy_keras.py and
    workers/sync_bn_and_local.py."""
    from conftest import run_ranks
    pytest.importorskip("tf_keras")
    return run_ranks(3, ONE_JOB, WORKERS / "legacy_keras.py", WORKERS / "sync_bn_and_local.py",
                     timeout=450, env=LEGACY_ENV)


def test_sync_batch_norm_and_local_variables(keras3_job):
    keras3_job.expect_ok().expect_line("keras api OK", range(3))


def test_sharded_optimizer_at_three_ranks(keras3_job):
    keras3_job.expect_ok().expect_line("keras sharded OK", range(3))


def test_keras2_fit_aggregation_callbacks_and_load_model(keras2_job):
    keras2_job.expect_ok().expect_line("keras2 OK", range(3))


def test_keras2_sync_batch_norm_and_local_variables(keras2_job):
    keras2_job.expect_ok().expect_line("keras api OK", range(3))
