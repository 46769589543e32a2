"""hvdlite.keras on each Keras 3 backend (TensorFlow, torch, JAX), on real
ranks: one 2-rank job per backend (starting Keras ranks costs more than the
checks) runs three workers' checks, and each test reads its worker's line:

- workers/fit_and_callbacks.py: model.fit with DistributedOptimizer against
  one process on the concatenated batch, the callbacks,
  backward_passes_per_step, compression, load_model, helpers; on JAX inside
  Keras' jitted train step;
- workers/keras_powersgd.py: PowerSGD compression (hvd.Compression.powersgd)
  inside the compiled train step on TensorFlow and JAX (NumPy on the host),
  on torch with hvdlite.torch's;
- workers/keras_sharded.py: DistributedOptimizer(sharding_stage=1|2) against
  the unsharded optimizer in float64, compiled and eager, clipping,
  accumulation, fp16, checkpoints, KerasState, refusals (its 3-rank check is
  test_keras_api.py's). Each of its checks sets float64 for its own run and
  the float32 default back after it (Note [Float64 per check]).

The job is tests/common/workers/one_job.py's; a check that fails ends
it, so a later worker's test fails too, pointing at the same FAILED line."""
from pathlib import Path

import pytest

pytest.importorskip("keras")
pytestmark = pytest.mark.timeout(600)  # the first test of a backend waits for its job

WORKERS = Path(__file__).parent / "workers"
ONE_JOB = Path(__file__).parents[1] / "common" / "workers" / "one_job.py"
ENV = {"JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.fixture(scope="module", params=[
    pytest.param("tensorflow", marks=pytest.mark.tensorflow_ops), "torch", "jax"])
def backend_job(request):
    """The finished job of the three workers on request.param's backend."""
    from conftest import run_ranks
    pytest.importorskip(request.param)
    return run_ranks(2, ONE_JOB, WORKERS / "fit_and_callbacks.py", WORKERS / "keras_powersgd.py",
                     WORKERS / "keras_sharded.py", timeout=540,
                     env={**ENV, "KERAS_BACKEND": request.param})


def test_fit_callbacks_and_load_model_on_backend(backend_job):
    backend_job.expect_ok().expect_line("keras OK", range(2))


def test_powersgd_compression_on_backend(backend_job):
    backend_job.expect_ok().expect_line("keras powersgd OK", range(2))


def test_sharded_optimizer_on_backend(backend_job):
    backend_job.expect_ok().expect_line("keras sharded OK", range(2))
