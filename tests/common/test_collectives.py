"""Every collective x dtype x shape on 2 and 3 real ranks, against NumPy."""
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "collectives.py"


@pytest.mark.parametrize("np_,env", [(2, {}), (3, {}),
                                     (3, {"HVDLITE_SHM_DISABLE": "1"})])  # tcp
def test_every_collective_matches_numpy(world, np_, env):
    result = world(np_, WORKER, timeout=240, env=env).expect_ok()
    for rank in range(np_):
        assert "collectives OK" in "\n".join(result.lines(rank)), result


@pytest.mark.timeout(200)
@pytest.mark.parametrize("np_,env", [
    (2, {}),                                                          # shm, its 1 MiB slot
    (3, {"HVDLITE_PIPELINE_CHUNK": "100003"}),                        # shm, odd chunk
    (2, {"HVDLITE_SHM_DISABLE": "1", "HVDLITE_PIPELINE_CHUNK": "65536"}),  # tcp, chunked
    (2, {"HVDLITE_SHM_DISABLE": "1"}),                                # tcp, whole batches
])
def test_large_fused_allreduce_in_pipeline_chunks_matches_numpy(world, np_, env):
    result = world(np_, WORKER.parent / "pipelined.py", timeout=180, env=env).expect_ok()
    for rank in range(np_):
        assert f"rank {rank}: pipelined allreduce OK" in "\n".join(result.lines(rank)), result
