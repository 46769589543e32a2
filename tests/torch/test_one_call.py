"""The synchronous collectives on CPU tensors in one call into the core
(Note [Torch collectives in one call] in csrc/python/torch_one_call.cc):
allreduce(_), broadcast(_), allgather and grouped_allreduce(_) give the same
bytes or error as the general path for every dtype and op, the general path
takes everything the one call declines (gradients kept), and ranks that
disagree all raise, naming the tensor; allreduce_async(_) in one call
(Note [Asynchronous allreduce of a tensor in one call]) likewise, its
handles taken by poll() and synchronize() as the general path's."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKERS = Path(__file__).parent / "workers"


def test_one_call_allreduce_matches_the_general_path(world):
    result = world(2, WORKERS / "one_call_checks.py", timeout=180).expect_ok()
    for rank in range(2):
        assert f"rank {rank}: one call OK" in "\n".join(result.lines(rank)), result


def test_async_one_call_matches_the_general_path(world):
    result = world(2, WORKERS / "one_call_async_checks.py", timeout=180).expect_ok()
    for rank in range(2):
        assert f"rank {rank}: async one call OK" in "\n".join(result.lines(rank)), result
