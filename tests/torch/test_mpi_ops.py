"""hvdlite.torch's collectives (hvdlite/torch/collectives.py, autograd_ops.py,
compression.py): a lost peer fails them fast, and over the MPI transport they
match torch references (every collective over hvdliterun at 2 and 3 ranks:
test_torch_jobs.py)."""
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKERS = Path(__file__).parent / "workers"


def test_lost_peer_fails_collectives_fast(world):
    result = world(2, WORKERS / "lost_peer.py", timeout=120)
    result.expect_fast_failures([0], "rank 1")
    out = "\n".join(result.lines(0))
    assert re.search(r"rank 0 got \w+Error, a RuntimeError: True", out), result
    assert re.search(r"rank 0 async failed \(HorovodInternalError: True\): .*rank 1", out), result


def test_collectives_over_mpirun():
    # The MPI transport under the torch binding (tests/common/test_mpi.py has the rest).
    from conftest import run_mpirun
    result = run_mpirun(2, WORKERS / "collectives.py", "check_basics", "check_allreduce",
                        "check_grouped_allreduce", "check_alltoall",
                        "check_reinit", timeout=180, env={"HVDLITE_CPU_OPERATIONS": "mpi"})
    result.expect_ok()
    for rank in range(2):
        assert "torch collectives OK" in "\n".join(result.lines(rank)), result
