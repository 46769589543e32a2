"""Elastic jobs end to end with hvdlite.numpy.elastic.ObjectState: real
workers under `hvdliterun --min-np ...`, "hosts" being loopback addresses
(127.0.0.x), each a slot group on this machine."""
import os
import re
import sys
import time
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))

from elastic_jobs import (FAST, THREE_HOSTS, THREE_LOSING_ONE, assert_trained,  # noqa: E402
                          discovery_script, finals, survivors_of_killed_worker)


def test_killed_worker_survivors_restore_and_finish_at_two(world):
    result = world(3, WORKERS / "numpy_elastic.py", "--steps", 15, "--kill", "1:5",
                   timeout=90, launcher_args=THREE_LOSING_ONE).expect_ok()
    assert "excluding host 127.0.0.2" in result.stderr, result
    assert_trained(survivors_of_killed_worker(result, 5), 15, 2)
    for worker in (0, 2):
        assert "reset: now rank" in "\n".join(result.lines(worker)), result


def test_discovered_host_joins_and_gets_the_committed_state(world, tmp_path):
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"])
    result = world(2, WORKERS / "numpy_elastic.py", "--steps", 12, "--grow", f"{hosts}:4",
                   timeout=90, launcher_args=["--min-np", "2", "--max-np", "3", "--log-level", "info",
                                              "--host-discovery-script", script, *FAST]).expect_ok()
    assert "re-forming the job at 3 rank(s)" in result.stderr, result
    # The new worker started from the survivors' commit, not from scratch.
    assert "train from step 4 as rank 2 of 3" in "\n".join(result.lines(2)), result
    # At info: each round from the driver, each worker's place in it, and the core's round.
    assert re.search(r"hvdliterun: round 1: rank 0: worker \d+ on 127\.0\.0\.1, .*rank 2: worker \d+ on "
                     r"127\.0\.0\.3", result.stderr), result
    assert re.search(r"hvdlite: worker \S+ joined round 1 of the elastic job as rank 2 of 3",
                     "\n".join(result.lines(2, "stderr"))), result
    assert re.search(r"I hvdlite rank 0\] hosts \(3\): .*; job '\w+', rendezvous round 1",
                     result.stderr), result
    assert_trained(finals(result, [0, 1, 2]), 12, 3)


def test_removed_host_leaves_and_the_others_go_on(world, tmp_path):
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1", "127.0.0.3:1"])
    result = world(3, WORKERS / "numpy_elastic.py", "--steps", 10, "--shrink", f"{hosts}:4",
                   timeout=90, launcher_args=["--min-np", "2", "--host-discovery-script", script,
                                              *FAST]).expect_ok()
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
    assert "it has already been reset 0 time(s), the limit (--reset-limit 0); stopping" \
        in result.stderr, result
    assert not finals(result, [0, 1, 2]), result


def test_fewer_than_min_np_stops_the_job_cleanly(world):
    result = world(2, WORKERS / "numpy_elastic.py", "--steps", 15, "--kill", "1:3",
                   timeout=60, launcher_args=["--min-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1",
                                              "--elastic-timeout", "1", *FAST])
    assert result.returncode == 1, result
    assert "fewer than --min-np 2 slots have been usable for 1 s" in result.stderr, result
    assert "excluded after failures: 127.0.0.2" in result.stderr, result


def test_worker_lost_inside_the_rendezvous_is_noticed_at_once(world):
    # Worker 1 dies right after counting in for round 0: the others are in the
    # core's rendezvous, waiting for its address. The driver aborts that
    # round (Note [Rendezvous abort]); nobody waits out --start-timeout.
    started = time.monotonic()
    result = world(3, WORKERS / "numpy_elastic.py", "--steps", 6, "--die-in-rendezvous", "1:0",
                   timeout=90, launcher_args=["--min-np", "2", "-H", THREE_HOSTS,
                                              "--discovery-interval", "0.2",
                                              "--start-timeout", "60"]).expect_ok()
    assert time.monotonic() - started < 20, result
    death = re.search(r"worker 1 \(rank 1 of round 0, host 127\.0\.0\.2, pid \d+\) was killed "
                      r"by signal 9 \(SIGKILL\)", result.stderr)
    assert death, result
    for worker in (0, 2):
        note = "\n".join(result.lines(worker, "stderr"))
        assert f"worker 127.0.0.{worker + 1}/0/{worker} could not join round 0 of the elastic " \
               f"job (rank " in note, result
        assert f"gave up the rendezvous of '" in note and f"/r0/': {death.group(0)})" in note, \
            result
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 2], result
    assert_trained(reports, 6, 2)


def test_job_removes_the_segments_its_killed_worker_left(world):
    # Every worker leaves a file named like one of the job's round-0 segments
    # (as a worker killed while its process set maps one does). Over TCP the
    # survivors never clean /dev/shm themselves: the launcher must, before
    # the next round and at the end.
    result = world(3, WORKERS / "numpy_elastic.py", "--steps", 8, "--kill", "1:3",
                   "--leave-segment", timeout=90,
                   launcher_args=["--min-np", "2", "-H", THREE_HOSTS, "--tcp", *FAST])
    left = [line.split("left ", 1)[1] for line in result.stdout.splitlines() if "left /dev" in line]
    remaining = [path for path in left if os.path.exists(path)]
    for path in remaining:  # the test's own cleanup, so that a failure leaks nothing
        os.remove(path)
    result.expect_ok()
    assert len(left) == 3, result
    assert not remaining, f"the elastic job left {remaining} in /dev/shm"
    # ...and already before the survivors' next round: round 0's are stale.
    for worker in (0, 2):
        assert "leftovers after reset: []" in result.lines(worker), result
    assert_trained(finals(result, [0, 2]), 8, 2)


def test_a_host_that_fails_again_after_its_cooldown_is_excluded_twice_as_long(world):
    # Every worker on 127.0.0.2 exits with code 3 two steps after it joined.
    # With a cooldown range the host comes back after 2 to 3 s (Note
    # [Cooldown length]); its new worker gets the committed state, fails
    # again, and the host stays out for 4 s, the range's end.
    result = world(3, WORKERS / "flaky_host.py", "--flaky", "127.0.0.2:2", timeout=120,
                   launcher_args=["--min-np", "2", "-H", THREE_HOSTS,
                                  "--blacklist-cooldown-range", "1", "4", *FAST]).expect_ok()
    failed = re.findall(r"worker (\d) \(rank \d of round \d+, host 127\.0\.0\.2, pid \d+\) "
                        r"exited with code 3\.", result.stderr)
    assert failed[:1] == ["1"] and len(failed) == 2, result
    second = int(failed[1])
    excluded = re.findall(r"excluding host 127\.0\.0\.2 for (\d) s: worker (\d) failed there",
                          result.stderr)
    assert [worker for _, worker in excluded] == ["1", str(second)], result
    assert excluded[0][0] in ("2", "3") and excluded[1][0] == "4", result
    assert "the cooldown of excluded host(s) 127.0.0.2 ended" in result.stderr, result
    # The re-admitted worker started from the survivors' commit, as rank 2.
    resumed = re.search(r"train from step (\d+) as rank 2 of 3", "\n".join(result.lines(second)))
    assert resumed and int(resumed.group(1)) > 2, result
    reports = finals(result, [0, 1, 2, second])
    assert sorted(reports) == [0, 2], result
    sizes = reports[0]["sizes"]
    assert [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s] == [3, 2, 3, 2], sizes
    assert all(len(r["sizes"]) == r["step"] for r in reports.values()), reports
    assert_trained(reports, reports[0]["step"], 2)
