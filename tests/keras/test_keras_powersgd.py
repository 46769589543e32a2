"""hvdlite.keras' PowerSGD compression (hvd.Compression.powersgd) on real
ranks, on each Keras 3 backend: inside the compiled train step on TensorFlow
and JAX (NumPy on the host), on torch with hvdlite.torch's (workers/keras_powersgd.py)."""
from pathlib import Path

import pytest

pytest.importorskip("keras")

WORKER = Path(__file__).parent / "workers" / "keras_powersgd.py"


@pytest.mark.parametrize("backend", [
    pytest.param("tensorflow", marks=pytest.mark.tensorflow_ops), "torch", "jax"])
def test_powersgd_compression_on_backend(world, backend):
    pytest.importorskip(backend)
    result = world(2, WORKER, timeout=300, env={"KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu",
                                                "TF_CPP_MIN_LOG_LEVEL": "2"}).expect_ok()
    for rank in range(2):
        assert "keras powersgd OK" in result.lines(rank), result
