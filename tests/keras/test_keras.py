"""hvdlite.keras on real ranks over MPI: workers/fit_and_callbacks.py's model.fit
check through `hvdliterun --mpi` (its every check on each backend, over the
default transport: test_keras_backends.py)."""
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow_ops

WORKER = Path(__file__).parent / "workers" / "fit_and_callbacks.py"


def test_fit_and_callbacks_through_hvdliterun_mpi():
    from conftest import run_hvdliterun_mpi
    result = run_hvdliterun_mpi(2, WORKER, "check_fit", timeout=300,
                                env={"TF_CPP_MIN_LOG_LEVEL": "2", "HVDLITE_CPU_OPERATIONS": "mpi"})
    result.expect_ok()
    assert result.stdout.count("keras OK") == 2, result
