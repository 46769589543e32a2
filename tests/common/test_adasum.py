"""Adasum (csrc/core/adasum.cc) through hvdlite.numpy on 2 and 4 real ranks
against NumPy, and its errors on 3 ranks and on a process set."""
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "adasum.py"


@pytest.mark.parametrize("np_", [2, 4, 3])
def test_adasum_matches_numpy_or_explains_why_not(world, np_):
    result = world(np_, WORKER, timeout=240).expect_ok()
    result.expect_line("adasum OK", range(np_))


def test_adasum_over_mpi():
    # Its exchanges (alltoallv) and per-tensor sums (allgatherv) over the MPI transport.
    from conftest import run_mpirun
    result = run_mpirun(2, WORKER, timeout=180, env={"HVDLITE_CPU_OPERATIONS": "mpi"}).expect_ok()
    result.expect_line("adasum OK", range(2))
