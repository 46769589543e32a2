"""A rank that sends the coordinator an absurd request list fails the job
cleanly: every rank's collective fails within seconds with PeerLostError
naming that rank and what was wrong, and nothing hangs or crashes (Note
[Checked peer messages] in csrc/core/message.cc). The C++ tests cover each
check; this one the whole path between real processes."""
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"

CASES = {
    "count": "rank 1 sent a request list claiming 4294967295 requests in ",
    "rank": "rank 1 sent an allreduce of 'grad' claiming to come from rank 2 of the process set, "
            "on the connection of its rank 1",
    "shape": "rank 1 sent an allreduce of 'grad' of shape [4611686018427387903, 4]: a negative dimension, "
             "or more bytes than fit in 64 bits",
}


# Shared memory (one host's default) and TCP carry negotiation alike.
@pytest.mark.parametrize("how, transport", [(how, "auto") for how in sorted(CASES)] + [("count", "tcp")])
def test_a_bad_request_list_fails_every_rank_naming_the_sender(world, how, transport):
    result = world(3, WORKERS / "bad_peer.py", how, timeout=90, env={"HVDLITE_CPU_OPERATIONS": transport})
    assert result.returncode == 0, result
    for rank in range(3):
        out = "\n".join(result.lines(rank))
        assert f"rank {rank}: PeerLostError after" in out, result
        assert "ranks=[1]" in out, result
        assert CASES[how] in out, result
        assert "so the job stops here rather than trust it" in out, result
        assert f"rank {rank}: again PeerLostError" in out, result
        waited = float(out.split(" after ")[1].split(" s ")[0])
        assert waited < 10, result
