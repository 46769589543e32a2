"""The MPI transport and controller (csrc/transport/mpi/, hvdlite/common/
mpi_selection.py) on real ranks started by mpirun and by `hvdliterun --mpi`:
every collective against NumPy, fusion and the cache, join and process sets,
mismatches, init(comm=...), the MPI controller with the built-in data
transport, and a killed rank. Skipped, with the reason, in builds without MPI."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import mpi_environment, mpirun_path, run_hvdliterun_mpi, run_mpirun

WORKERS = Path(__file__).parent / "workers"
# On one host, mpirun jobs move data through shared memory by default
# (hvdlite/common/mpi_selection.py); these tests put the data on MPI too.
MPI_DATA = {"HVDLITE_CPU_OPERATIONS": "mpi"}


def all_ok(result, np_, marker):
    return all(marker in "\n".join(result.lines(r)) for r in range(np_))


def test_check_build_lists_mpi():
    mpirun_path()
    out = subprocess.run([sys.executable, "-m", "hvdlite.runner", "--check-build"],
                         capture_output=True, text=True, timeout=60).stdout
    assert "[X] MPI" in out and "Built without MPI" not in out, out


def test_every_collective_over_mpirun():
    result = run_mpirun(2, WORKERS / "collectives.py", timeout=120, env=MPI_DATA).expect_ok()
    assert all_ok(result, 2, "collectives OK"), result


def test_collectives_through_hvdliterun_mpi_on_three_ranks():
    result = run_hvdliterun_mpi(3, WORKERS / "collectives.py", "check_allreduce",
                                "check_allgather", "check_alltoall", "check_reducescatter",
                                "check_grouped_and_async", timeout=150, env=MPI_DATA).expect_ok()
    # hvdliterun --mpi passes the ranks' output on untagged: one line from each.
    assert result.stdout.splitlines().count("collectives OK") == 3, result


def test_fusion_cache_join_and_process_sets_over_mpi():
    result = run_mpirun(3, WORKERS / "join_sets.py", timeout=90, env=MPI_DATA).expect_ok()
    assert all_ok(result, 3, "join and process sets OK"), result
    result = run_mpirun(2, WORKERS / "fusion_cache.py", timeout=90, env=MPI_DATA).expect_ok()
    assert all_ok(result, 2, "fusion and cache OK"), result


def test_mismatched_collectives_fail_on_every_rank_over_mpi():
    result = run_mpirun(2, WORKERS / "mismatch.py", timeout=60, env=MPI_DATA).expect_ok()
    for rank in range(2):
        assert "allreduce of 'bad_shape' failed: mismatched shape" in \
            "\n".join(result.lines(rank)), result


def test_init_with_mpi4py_communicators_and_rank_lists():
    pytest.importorskip("mpi4py", reason="needs mpi4py (make venv installs it)")
    result = run_mpirun(3, WORKERS / "mpi_comm.py", timeout=90).expect_ok()
    assert all_ok(result, 3, "mpi comm OK"), result


def test_mpi_controller_with_the_builtin_data_transport():
    # The default on one host (Horovod's HOROVOD_CONTROLLER=mpi with
    # HOROVOD_CPU_OPERATIONS=gloo): negotiate over MPI, data through shared memory.
    pytest.importorskip("mpi4py", reason="the store's address travels over mpi4py")
    result = run_mpirun(2, WORKERS / "collectives.py", "check_allreduce", "check_broadcast",
                        timeout=90).expect_ok()
    assert all_ok(result, 2, "collectives OK"), result


@pytest.mark.parametrize("launcher", ["mpirun", "hvdliterun --mpi"])
def test_a_killed_rank_makes_mpirun_end_the_job_instead_of_hanging(launcher):
    # Data over MPI, and (hvdliterun) the default: shared memory under MPI's controller.
    # What ends the job here is mpirun, not hvdlite: Open MPI kills the
    # survivors as soon as rank 1 dies, before they could print a failure of
    # their own (run with --enable-recovery, they stay blocked in MPI). So
    # this proves what mpirun does with a job whose ranks were all training:
    # it ends, with rank 1 named, and no survivor finished its steps.
    run = run_mpirun if launcher == "mpirun" else run_hvdliterun_mpi
    result = run(3, WORKERS / "killed_rank.py", timeout=60,
                 env=MPI_DATA if launcher == "mpirun" else None)
    assert result.returncode != 0, result
    # Every rank, survivors included, was in the step before rank 1's death
    # (read from the whole output: mpirun does not tag hvdliterun --mpi's).
    assert sorted(re.findall(r"rank (\d) at step 19$", result.stdout, re.MULTILINE)) == \
        ["0", "1", "2"], result
    assert "no failure seen" not in result.stdout, result
    # mpirun names the rank that died and how.
    assert re.search(r"rank 1 .*signal 9|signal 9 \(Killed\)", result.stdout + result.stderr), result


def test_mpi_selected_outside_mpirun_says_how_to_start_the_job(world):
    mpirun_path()
    # Each rank starts MPI as a singleton; Open MPI 5 leaves a singleton's
    # shared-memory segment in /dev/shm even after MPI_Finalize, unless its
    # shared-memory transport is off.
    result = world(2, WORKERS / "named_steps.py", timeout=60,
                   env={"HVDLITE_CPU_OPERATIONS": "mpi", "OMPI_MCA_btl": "self"})
    assert result.returncode != 0, result
    assert "MPI_COMM_WORLD has this process as rank 0 of 1" in result.stderr, result
    assert "start the job with mpirun" in result.stderr, result


def test_init_with_comm_needs_an_mpi_build_and_mpi_selections():
    from hvdlite.common import mpi_selection
    with pytest.raises(ValueError, match="no MPI transport .* rebuild"):
        mpi_selection.communicator_environment([0], {}, mpi_built=False)
    # Checked before the communicator is touched (MPI must not start in pytest).
    with pytest.raises(ValueError, match="HVDLITE_CPU_OPERATIONS .* selects 'tcp'"):
        mpi_selection.communicator_environment([0], {"HOROVOD_CPU_OPERATIONS": "tcp"}, True)
