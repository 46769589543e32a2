"""hvdlite.keras' PowerSGD compression (hvd.Compression.powersgd) in the Keras
synthetic benchmark example. Its checks on each Keras 3 backend
(workers/keras_powersgd.py) run in test_keras_backends.py, in one job per
backend with workers/fit_and_callbacks.py's."""
from pathlib import Path

import pytest

pytest.importorskip("keras")


def test_keras_synthetic_benchmark_reports_powersgd_throughput(world):
    pytest.importorskip("torch")
    example = Path(__file__).parents[2] / "examples" / "keras" / "synthetic_benchmark.py"
    result = world(2, example, "--compression", "powersgd", "--steps", "5", "--warmup-steps", "2",
                   "--width", "64", "--batch-size", "8", timeout=180,
                   env={"KERAS_BACKEND": "torch"}).expect_ok()
    assert any("compression: powersgd  throughput:" in line for line in result.lines(0)), result
