"""Fusion, the response cache, mismatches, join, process sets, lifecycle and a
killed rank, each on real ranks."""
import re
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"


@pytest.mark.parametrize("np_", [2, 3])
def test_fusion_and_cache_from_many_threads(world, np_):
    result = world(np_, WORKERS / "fusion_cache.py", timeout=180)
    assert result.returncode == 0, result
    assert all("fusion and cache OK" in "".join(result.lines(r)) for r in range(np_)), result


def test_mismatched_collectives_fail_on_every_rank_and_the_job_goes_on(world):
    result = world(2, WORKERS / "mismatch.py", timeout=90)
    assert result.returncode == 0, result
    for rank in range(2):
        out = "\n".join(result.lines(rank))
        assert "mismatch OK" in out, result
        assert "allreduce of 'bad_shape' failed: mismatched shape" in out, result


def test_join_and_process_sets(world):
    result = world(3, WORKERS / "join_sets.py", timeout=90)
    assert result.returncode == 0, result
    assert all("join and process sets OK" in "".join(result.lines(r)) for r in range(3)), result


def test_init_shutdown_init_and_timeline(world, tmp_path):
    timeline = tmp_path / "timeline.json"
    result = world(2, WORKERS / "lifecycle.py", timeline, timeout=90)
    assert result.returncode == 0, result
    assert timeline.exists()


def test_killed_rank_fails_the_others_fast(world):
    result = world(3, WORKERS / "killed_rank.py", timeout=60)
    assert result.returncode != 0, result
    # The launcher names the rank that died.
    assert re.search(r"rank 1 .*signal 9", result.stderr), result
    # Every survivor failed on its own, within seconds, naming the lost rank.
    for rank in (0, 2):
        out = "\n".join(result.lines(rank))
        assert f"rank {rank} failed after" in out, result
        assert "rank 1" in out, result
