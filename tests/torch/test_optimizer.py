"""hvdlite.torch.DistributedOptimizer on real ranks against one process
(tests/torch/workers/optimizer_checks.py holds the checks)."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).parent / "workers" / "optimizer_checks.py"
# Three ranks: uneven batch sizes, a process set of two, two ranks joining early.
RANKS = 3


def test_distributed_optimizer_matches_one_process(world):
    world(RANKS, WORKER, timeout=180).expect_ok().expect_line("optimizer OK", range(RANKS))


def test_distributed_optimizer_through_hvdliterun_mpi():
    from conftest import run_hvdliterun_mpi
    result = run_hvdliterun_mpi(2, WORKER, "check_against_one_process", timeout=180,
                                env={"HVDLITE_CPU_OPERATIONS": "mpi"}).expect_ok()
    assert result.stdout.count("optimizer OK") == 2, result


def test_parameters_without_gradients_at_two_ranks(world):
    # The three-rank run above covers them too; two ranks is the even case.
    world(2, WORKER, "check_unused_parameters", timeout=180).expect_ok().expect_line(
        "optimizer OK", range(2))
