"""Elastic jobs end to end with hvdlite.numpy.elastic.ObjectState: real
workers under `hvdliterun --min-np ...`, "hosts" being loopback addresses
(127.0.0.x), each a slot group on this machine."""
import sys
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))

from elastic_jobs import assert_trained, discovery_script, finals  # noqa: E402

THREE_HOSTS = "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1"
FAST = ["--discovery-interval", "0.2", "--start-timeout", "20"]


def test_killed_worker_survivors_restore_and_finish_at_two(world):
    result = world(3, WORKERS / "numpy_elastic.py", "--steps", 15, "--kill", "1:5",
                   timeout=90, launcher_args=["--min-np", "2", "-H", THREE_HOSTS, *FAST])
    assert result.returncode == 0, result
    assert "worker 1 (rank 1 of round 0, host 127.0.0.2" in result.stderr, result
    assert "excluding host 127.0.0.2" in result.stderr, result
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 2], result
    assert_trained(reports, 15, 2)
    for worker in (0, 2):
        assert "reset: now rank" in "\n".join(result.lines(worker)), result


def test_discovered_host_joins_and_gets_the_committed_state(world, tmp_path):
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"])
    result = world(2, WORKERS / "numpy_elastic.py", "--steps", 12, "--grow", f"{hosts}:4",
                   timeout=90, launcher_args=["--min-np", "2", "--max-np", "3",
                                              "--host-discovery-script", script, *FAST])
    assert result.returncode == 0, result
    assert "re-forming the job at 3 rank(s)" in result.stderr, result
    # The new worker started from the survivors' commit, not from scratch.
    assert "train from step 4 as rank 2 of 3" in "\n".join(result.lines(2)), result
    assert_trained(finals(result, [0, 1, 2]), 12, 3)


def test_removed_host_leaves_and_the_others_go_on(world, tmp_path):
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1", "127.0.0.3:1"])
    result = world(3, WORKERS / "numpy_elastic.py", "--steps", 10, "--shrink", f"{hosts}:4",
                   timeout=90, launcher_args=["--min-np", "2", "--host-discovery-script", script,
                                              *FAST])
    assert result.returncode == 0, result
    assert "re-forming the job at 2 rank(s) (round 1): hosts changed" in result.stderr, result
    assert "is not part of round 1 of the elastic job" in "\n".join(result.lines(1, "stderr"))
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 2], result
    assert_trained(reports, 10, 2)
    # They went on from the commit they made when the host went away.
    for worker in (0, 2):
        assert "train from step 4" in "\n".join(result.lines(worker)), result


def test_reset_limit_stops_the_job_cleanly(world):
    result = world(3, WORKERS / "numpy_elastic.py", "--steps", 15, "--kill", "1:3",
                   timeout=60, launcher_args=["--min-np", "2", "--reset-limit", "0",
                                              "-H", THREE_HOSTS, *FAST])
    assert result.returncode == 1, result
    assert "it has already been reset 0 time(s), the --reset-limit; stopping" in result.stderr, \
        result
    assert not finals(result, [0, 1, 2]), result


def test_fewer_than_min_np_stops_the_job_cleanly(world):
    result = world(2, WORKERS / "numpy_elastic.py", "--steps", 15, "--kill", "1:3",
                   timeout=60, launcher_args=["--min-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1",
                                              "--elastic-timeout", "1", *FAST])
    assert result.returncode == 1, result
    assert "fewer than --min-np 2 slots have been usable for 1 s" in result.stderr, result
    assert "excluded after failures: 127.0.0.2" in result.stderr, result
