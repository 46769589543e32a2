"""allreduce_ on CPU tensors in one call into the core (Note [In-place
allreduce of a torch tensor in one call] in csrc/python/bind_collectives.cc):
the same bytes or error as the general path for every dtype and op, and the
general path for everything the one call declines."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKERS = Path(__file__).parent / "workers"


def test_one_call_allreduce_matches_the_general_path(world):
    result = world(2, WORKERS / "one_call_checks.py", timeout=180).expect_ok()
    for rank in range(2):
        assert f"rank {rank}: one call OK" in "\n".join(result.lines(rank)), result
