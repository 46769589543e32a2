"""hvdlite.torch's collectives (hvdlite/torch/async_ops.py, autograd_ops.py,
compression.py) on real ranks, against torch references; a lost peer fails
them fast."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKERS = Path(__file__).parent / "workers"


@pytest.mark.parametrize("np_", [2, 3])
def test_every_collective_matches_torch(world, np_):
    result = world(np_, WORKERS / "collectives.py", timeout=240)
    assert result.returncode == 0, result
    for rank in range(np_):
        assert "torch collectives OK" in "\n".join(result.lines(rank)), result


def test_lost_peer_fails_collectives_fast(world):
    result = world(2, WORKERS / "lost_peer.py", timeout=120)
    assert result.returncode != 0, result
    out = "\n".join(result.lines(0))
    assert "rank 0 allreduce failed after" in out, result
    assert "rank 0 async failed" in out, result
