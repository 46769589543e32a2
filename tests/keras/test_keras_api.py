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
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
LEGACY_ENV = dict(ENV, TF_USE_LEGACY_KERAS="1")


# One world size each (starting TensorFlow ranks is most of the cost): 3 for
# the Keras 3 and Keras 2 fits (an odd size catches averaging mistakes), 2 for
# Keras 2's SyncBatchNormalization, which shares the Keras 3 layer's statistics code.
@pytest.mark.parametrize("np_", [3])
def test_sync_batch_norm_and_local_variables(world, np_):
    world(np_, WORKERS / "sync_bn_and_local.py", timeout=400, env=ENV).expect_ok().expect_line(
        "keras api OK", range(np_))


@pytest.mark.parametrize("np_", [2])
def test_keras2_sync_batch_norm_and_local_variables(world, np_):
    pytest.importorskip("tf_keras")
    world(np_, WORKERS / "sync_bn_and_local.py", timeout=400,
          env=LEGACY_ENV).expect_ok().expect_line("keras api OK", range(np_))


@pytest.mark.parametrize("np_", [3])
def test_keras2_fit_aggregation_callbacks_and_load_model(world, np_):
    pytest.importorskip("tf_keras")
    world(np_, WORKERS / "legacy_keras.py", timeout=400,
          env=LEGACY_ENV).expect_ok().expect_line("keras2 OK", range(np_))
