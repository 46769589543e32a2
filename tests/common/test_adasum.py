"""Adasum (csrc/core/adasum.cc) through hvdlite.numpy on 2 and 4 real ranks
against NumPy, and its errors on 3 ranks and on a process set."""
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "adasum.py"


@pytest.mark.parametrize("np_", [2, 4, 3])
def test_adasum_matches_numpy_or_explains_why_not(world, np_):
    result = world(np_, WORKER, timeout=240)
    assert result.returncode == 0, result
    for rank in range(np_):
        assert f"rank {rank}: adasum OK" in "\n".join(result.lines(rank)), result
