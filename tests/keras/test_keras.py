"""hvdlite.keras on real ranks: model.fit with DistributedOptimizer against one
process, callbacks, backward_passes_per_step, load_model."""
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow_ops

WORKER = Path(__file__).parent / "workers" / "fit_and_callbacks.py"


def test_fit_callbacks_and_load_model(world):
    result = world(2, WORKER, timeout=300, env={"TF_CPP_MIN_LOG_LEVEL": "2"}).expect_ok()
    for rank in range(2):
        assert "keras OK" in result.lines(rank), result


def test_fit_and_callbacks_through_hvdliterun_mpi():
    from conftest import run_hvdliterun_mpi
    result = run_hvdliterun_mpi(2, WORKER, "check_fit", timeout=300,
                                env={"TF_CPP_MIN_LOG_LEVEL": "2", "HVDLITE_CPU_OPERATIONS": "mpi"})
    result.expect_ok()
    assert result.stdout.count("keras OK") == 2, result
