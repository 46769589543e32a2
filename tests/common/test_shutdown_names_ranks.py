"""A rank that shuts down while the others wait for a collective it never
submitted: the waiting ranks' error names it (Note [Naming who shut down] in
csrc/core/controller.cc), and nobody hangs (the timeout)."""
from pathlib import Path

import pytest

from conftest import run_mpirun

WORKERS = Path(__file__).parent / "workers"


@pytest.mark.parametrize("np_, launcher", [(2, "hvdliterun"), (3, "hvdliterun"), (3, "mpirun")])
def test_the_error_names_the_rank_that_never_submitted_the_collective(world, np_, launcher):
    # Under mpirun, negotiation (and so the shutdown exchange) goes over MPI.
    run = world if launcher == "hvdliterun" else run_mpirun
    result = run(np_, WORKERS / "partial_collective.py", timeout=60).expect_ok()
    last = np_ - 1
    for rank in range(np_):
        out = "\n".join(result.lines(rank))
        assert f"rank {rank}: done" in out, result
        if rank == last:
            continue
        assert (f"allreduce of 'not.on.last' failed: rank {last} never submitted it, and hvdlite "
                f"was shut down (rank {last} called shutdown() or its process is exiting)") in out, result
        assert "Every rank of the process set must submit each collective" in out, result
        assert f"rank {rank}: ShutdownError asked by [{last}], missing [{last}]" in out, result
