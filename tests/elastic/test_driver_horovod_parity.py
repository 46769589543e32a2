"""The elastic driver where Horovod's elastic tests and jobs expect
Horovod's behaviour: a job that ends just as a round with new workers is
published (Note [Training over] in hvdlite/runner/elastic/driver.py), the
first round's size, and the host names discovery gives. (The cooldown's
length is in test_driver_parts.py.)"""
import json
import sys
import time
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))

from elastic_jobs import discovery_script, finals  # noqa: E402

JOB = WORKERS / "parity_job.py"
FAST = ["--discovery-interval", "0.2", "--start-timeout", "20"]

pytestmark = pytest.mark.timeout(120)


def placed(result, workers):
    """{worker: its "placed <json>" report}."""
    return {worker: json.loads(line[len("placed "):]) for worker in workers
            for line in result.lines(worker) if line.startswith("placed ")}


def test_a_round_published_as_training_ends_lets_the_job_end_at_once(world, tmp_path):
    # Rank 0 adds a host after its last commit and every rank exits 2 s
    # later: the driver has published a round with a new worker by then,
    # which nobody else joins. It leaves as soon as the first survivor has
    # finished (before: it waited --elastic-timeout + 60 s, and the job
    # exited 1).
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"])
    started = time.monotonic()
    result = world(2, JOB, "--steps", 5, "--grow-at-end", hosts, "--linger", 2, timeout=100,
                   launcher_args=["--min-np", "2", "--max-np", "3", "--elastic-timeout", "30",
                                  "--host-discovery-script", script, *FAST]).expect_ok()
    took = time.monotonic() - started
    assert "re-forming the job at 3 rank(s) (round 1)" in result.stderr, result
    assert ("was to join round 1 of the elastic job, but training is over (worker "
            in "\n".join(result.lines(2, "stderr"))), result
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 1], result
    assert all(r == {"step": 5, "total": 10.0, "size": 2} for r in reports.values()), reports
    assert took < 20, (took, result)


def test_first_round_takes_every_slot_up_to_max_np_and_names_hosts_as_discovery(world, tmp_path):
    # Horovod's first round: every usable slot up to --max-np, not -np and
    # then a re-form to grow (which --reset-limit 0 would forbid). Each
    # worker's HOROVOD_HOSTNAME is the name discovery printed, so localhost
    # and 127.0.0.1 are two hosts, as Horovod's elastic tests expect.
    script, _ = discovery_script(tmp_path, ["localhost:1", "127.0.0.1:2"])  # 3 slots
    result = world(2, JOB, "--steps", 3, timeout=100,
                   launcher_args=["--min-np", "2", "--max-np", "3", "--reset-limit", "0",
                                  "--host-discovery-script", script, *FAST]).expect_ok()
    assert "re-forming" not in result.stderr, result
    reports = finals(result, [0, 1, 2, 3])
    assert sorted(reports) == [0, 1, 2], result
    assert all(r == {"step": 3, "total": 9.0, "size": 3} for r in reports.values()), reports
    layout = sorted((p["rank"], p["hostname"], p["local_rank"], p["local_size"], p["size"])
                    for p in placed(result, [0, 1, 2]).values())
    assert layout == [(0, "localhost", 0, 1, 3), (1, "127.0.0.1", 0, 2, 3),
                      (2, "127.0.0.1", 1, 2, 3)], result
