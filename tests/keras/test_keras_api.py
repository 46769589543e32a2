"""hvdlite.keras on real ranks: SyncBatchNormalization vs one BatchNormalization
on the concatenated batch, local variables (PartialDistributedOptimizer,
register_local_var, the broadcast callback), and Keras 2 (tf_keras with
TF_USE_LEGACY_KERAS=1): fit, callbacks, backward_passes_per_step, load_model, and
Horovod's Keras 2 optimizer surface (_compute_gradients, _agg_helper, aggregation in
tf.function, PartialDistributedOptimizer) on both kinds of tf_keras optimizer."""
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow_ops

WORKERS = Path(__file__).parent / "workers"
ONE_JOB = Path(__file__).parents[1] / "common" / "workers" / "one_job.py"
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
LEGACY_ENV = dict(ENV, TF_USE_LEGACY_KERAS="1")


# One world size each (starting TensorFlow ranks is most of the cost): 3
# (an odd size catches averaging mistakes). Keras 2's checks, the fit's and
# SyncBatchNormalization's, share one job (tests/common/workers/one_job.py).
@pytest.mark.parametrize("np_", [3])
def test_sync_batch_norm_and_local_variables(world, np_):
    world(np_, WORKERS / "sync_bn_and_local.py", timeout=400, env=ENV).expect_ok().expect_line(
        "keras api OK", range(np_))


@pytest.fixture(scope="module")
def keras2_job():
    """The finished 3-rank Keras 2 job of workers/legacy_keras.py and
    workers/sync_bn_and_local.py (each prints its own line)."""
    from conftest import run_ranks
    pytest.importorskip("tf_keras")
    return run_ranks(3, ONE_JOB, WORKERS / "legacy_keras.py", WORKERS / "sync_bn_and_local.py",
                     timeout=450, env=LEGACY_ENV)


@pytest.mark.timeout(500)
def test_keras2_fit_aggregation_callbacks_and_load_model(keras2_job):
    keras2_job.expect_ok().expect_line("keras2 OK", range(3))


@pytest.mark.timeout(500)
def test_keras2_sync_batch_norm_and_local_variables(keras2_job):
    keras2_job.expect_ok().expect_line("keras api OK", range(3))
