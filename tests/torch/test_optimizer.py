"""hvdlite.torch.DistributedOptimizer over the MPI transport against one
process (tests/torch/workers/optimizer_checks.py holds the checks; the same
checks over hvdliterun at 2 and 3 ranks: test_torch_jobs.py)."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).parent / "workers" / "optimizer_checks.py"


def test_distributed_optimizer_through_hvdliterun_mpi():
    from conftest import run_hvdliterun_mpi
    result = run_hvdliterun_mpi(2, WORKER, "check_against_one_process", timeout=180,
                                env={"HVDLITE_CPU_OPERATIONS": "mpi"}).expect_ok()
    assert result.stdout.count("optimizer OK") == 2, result
