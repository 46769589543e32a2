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


def test_keras_synthetic_benchmark_reports_powersgd_throughput(world):
    pytest.importorskip("torch")
    example = Path(__file__).parents[2] / "examples" / "keras" / "synthetic_benchmark.py"
    result = world(2, example, "--compression", "powersgd", "--steps", "5", "--warmup-steps", "2",
                   "--width", "64", "--batch-size", "8", timeout=180,
                   env={"KERAS_BACKEND": "torch"}).expect_ok()
    assert any("compression: powersgd  throughput:" in line for line in result.lines(0)), result
