"""hvdlite.tensorflow on real ranks: a lost peer, ops and tape over mpirun,
collectives never run early, pruned or merged. (Every op against NumPy,
gradients, DistributedGradientTape vs one process, errors: workers/ops_and_tape.py,
in test_tf_jobs.py's 3-rank job.)"""
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow_ops

WORKER = Path(__file__).parent / "workers" / "ops_and_tape.py"


def test_lost_peer_fails_tf_ops_fast(world):
    result = world(2, Path(__file__).parent / "workers" / "lost_peer.py", timeout=120,
                   env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    result.expect_fast_failures([0], "rank 1")
    assert "rank 0 eager failed (HvdliteInternalError: True)" in "\n".join(result.lines(0)), result


def test_ops_and_tape_over_mpirun():
    from conftest import run_mpirun
    result = run_mpirun(2, WORKER, "function", "tape", "reinit", timeout=300,
                        env={"TF_CPP_MIN_LOG_LEVEL": "2", "HVDLITE_CPU_OPERATIONS": "mpi"})
    result.expect_ok().expect_line("tensorflow OK", range(2))


def test_collectives_never_run_early_pruned_or_merged(world):
    """Note [Stateful collectives]: no collective is run early, pruned or merged."""
    world(2, Path(__file__).parent / "workers" / "stateful_ops.py", timeout=120,
          env={"TF_CPP_MIN_LOG_LEVEL": "2", "HVDLITE_STALL_CHECK_TIME_SECONDS": "5",
               "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "20"}).expect_ok().expect_line(
        "stateful OK", range(2))
