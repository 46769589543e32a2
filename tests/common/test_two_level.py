"""The two-level allreduce and allgather across hosts (Note [Two-level
allreduce], Note [Two-level allgather]), on fake hosts of one machine: every
dtype, odd sizes, every op, fused and grouped batches, uneven allgathers and
process sets against NumPy, bitwise-equal results on every rank, and the
choice of algorithm (automatic, forced off, not for uneven hosts); the bytes
each host sends: test_tcp's allgather_across_hosts_sends_what_hosts_lack.
The same on real hosts in network namespaces: tests/runner/test_multihost.py."""
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "two_level.py"


@pytest.mark.parametrize("np_,per_host,mode", [
    (4, 2, "auto"),   # 2 hosts x 2: two levels
    (6, 2, "auto"),   # 3 hosts x 2, and process sets over 2 hosts (two levels) or 1 rank each
    (4, 2, "flat"),   # HVDLITE_HIERARCHICAL_ALLREDUCE=0 and _ALLGATHER=0
], ids=["2x2", "3x2", "forced-off"])  # uneven hosts (2 + 1): test_tcp two-level
def test_two_level_allreduce_and_allgather_match_numpy_on_every_rank(world, np_, per_host, mode):
    result = world(np_, WORKER, per_host, mode, timeout=120).expect_ok()
    for rank in range(np_):
        assert f"rank {rank}: two-level {mode} OK" in "\n".join(result.lines(rank)), result
