"""Every collective x dtype x shape on 2 and 3 real ranks, against NumPy."""
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "collectives.py"


@pytest.mark.parametrize("np_", [2, 3])
def test_every_collective_matches_numpy(world, np_):
    result = world(np_, WORKER, timeout=240)
    assert result.returncode == 0, result
    for rank in range(np_):
        assert "collectives OK" in "\n".join(result.lines(rank)), result
