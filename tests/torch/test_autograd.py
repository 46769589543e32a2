"""The gradients of hvdlite.torch's collectives (hvdlite/torch/autograd_ops.py)
over the MPI transport against Horovod's definitions, computed by hand in each
worker (tests/torch/workers/autograd_checks.py; every check over hvdliterun
at 2 and 3 ranks: test_torch_jobs.py)."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).parent / "workers" / "autograd_checks.py"


def test_gradients_over_mpirun():
    # The same backward passes over the MPI transport.
    from conftest import run_mpirun
    result = run_mpirun(2, WORKER, "check_allreduce", "check_allgather", "check_alltoall",
                        "check_reducescatter", timeout=180,
                        env={"HVDLITE_CPU_OPERATIONS": "mpi"}).expect_ok()
    for rank in range(2):
        assert "autograd OK" in result.lines(rank), result
