"""PyTorch elastic jobs (hvdlite.torch.elastic) on real workers: a killed
worker, a growing job, and the ElasticSampler's exactly-once epochs (a worker
that joins with collectives before run(): test_late_joiners.py)."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))
from reference import reference_torch  # noqa: E402

from elastic_jobs import (FAST, THREE_LOSING_ONE, discovery_script, finals,  # noqa: E402
                          survivors_of_killed_worker)


def assert_matches_one_process(reports, steps, size):
    for report in reports.values():
        assert report["step"] == steps and report["size"] == size, reports
        # Completed optimizer steps == committed steps: nothing lost, nothing twice.
        assert report["applied"] == steps, reports
    first = next(iter(reports.values()))
    for report in reports.values():  # identical parameters (and momentum) everywhere
        assert report["weights"] == first["weights"], reports
        assert report["momentum"] == first["momentum"], reports
    weights, momentum = reference_torch(steps)
    np.testing.assert_allclose(first["weights"], weights, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(first["momentum"], momentum, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("sharding", [[], ["--sharding-stage", "2"]], ids=["unsharded", "sharded"])
def test_killed_worker_of_three_survivors_restore_the_commit_and_finish_at_two(world, sharding):
    result = world(3, WORKERS / "torch_elastic.py", "--steps", 12, "--kill", "1:5", *sharding,
                   timeout=120, launcher_args=THREE_LOSING_ONE).expect_ok()
    assert_matches_one_process(survivors_of_killed_worker(result, 5), 12, 2)


@pytest.mark.parametrize("compression", [[], ["--powersgd"], ["--sharding-stage", "1"]],
                         ids=["plain", "powersgd", "sharded"])
def test_job_of_one_grows_and_the_new_worker_gets_model_and_optimizer_state(world, tmp_path,
                                                                            compression):
    # Started alone, the optimizer must still be ready to average once the job grows.
    # With PowerSGD the new worker must also get its step count from the
    # sync: else it would still send plain allreduces the others compress.
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1"])
    result = world(1, WORKERS / "torch_elastic.py", "--steps", 10, "--grow", f"{hosts}:4",
                   *compression, timeout=120,
                   launcher_args=["--min-np", "1", "--host-discovery-script", script,
                                  *FAST]).expect_ok()
    assert "train from step 4 as rank 1 of 2" in "\n".join(result.lines(1)), result
    reports = finals(result, [0, 1])
    assert_matches_one_process(reports, 10, 2)
    if "--powersgd" in compression:
        assert [r["compressed_steps"] for r in reports.values()] == [10, 10], reports


def test_elastic_sampler_processes_each_sample_once_per_epoch_across_a_resize(world, tmp_path):
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"])
    result = world(2, WORKERS / "torch_sampler.py", "--grow", f"{hosts}:3", timeout=120,
                   launcher_args=["--min-np", "2", "--host-discovery-script", script, *FAST])
    result.expect_ok()
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 1, 2] and {r["size"] for r in reports.values()} == {3}, result
    seen = reports[0]["seen"]
    assert all(report["seen"] == seen for report in reports.values()), reports
    for epoch, samples in seen.items():
        # Every sample once; only the padding that evens out the ranks' shares
        # (at most size - 1 per sharing) may repeat one.
        assert sorted(set(samples)) == list(range(40)), (epoch, samples)
        assert len(samples) - 40 <= 2 * 2, (epoch, samples)
    # Epoch 0: 3 batches of 2 x 4 samples at 2 ranks, the other 16 at 3 ranks.
    assert len(seen["0"]) in range(40, 45), seen["0"]


@pytest.mark.parametrize("how, ending", [("exit9", "exited with code 9"),
                                         ("sigkill", "was killed by signal 9 (SIGKILL)")])
def test_a_failure_that_would_repeat_excludes_its_host_and_the_job_finishes_at_two(
        world, tmp_path, how, ending):
    # localhost:2 and 127.0.0.1:1 from a discovery script; whoever is rank 2
    # ends in step 23 of 60 (commits every 5 steps). Its host is excluded for
    # good whether it exited with a code or was killed, so no new worker
    # starts there to fail the same way: the job finishes at 2 ranks.
    script, _ = discovery_script(tmp_path, ["localhost:2", "127.0.0.1:1"])
    result = world(3, WORKERS / "torch_elastic.py", "--steps", 60, "--die", f"2:23:{how}",
                   "--commit-every", 5, timeout=120,
                   launcher_args=["--min-np", "2", "--max-np", "3", "--host-discovery-script",
                                  script, *FAST]).expect_ok()
    assert re.search(rf"worker 2 \(rank 2 of round 0, host 127\.0\.0\.1, pid \d+\) "
                     rf"{re.escape(ending)}", result.stderr), result
    assert "excluding host 127.0.0.1 from the job: worker 2 failed there" in result.stderr, result
    assert "re-forming the job at 2 rank(s) (round 1)" in result.stderr, result
    assert "round 2" not in result.stderr and not result.lines(3), result  # nothing more started
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 1], result
    for worker in (0, 1):  # back to the commit of step 20
        assert "train from step 20 as rank" in "\n".join(result.lines(worker)), result
    assert_matches_one_process(reports, 60, 2)
