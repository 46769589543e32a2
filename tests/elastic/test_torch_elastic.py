"""PyTorch elastic jobs (hvdlite.torch.elastic) on real workers: a killed
worker, a growing job, and the ElasticSampler's exactly-once epochs."""
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))
from reference import reference_torch  # noqa: E402

from elastic_jobs import discovery_script, finals

FAST = ["--discovery-interval", "0.2", "--start-timeout", "20"]


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


def test_killed_worker_of_three_survivors_restore_the_commit_and_finish_at_two(world):
    result = world(3, WORKERS / "torch_elastic.py", "--steps", 12, "--kill", "1:5",
                   timeout=120, launcher_args=["--min-np", "2", "-H",
                                               "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1", *FAST])
    assert result.returncode == 0, result
    assert "worker 1 (rank 1 of round 0, host 127.0.0.2" in result.stderr, result
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 2], result
    for worker in (0, 2):
        assert "train from step 5 as rank" in "\n".join(result.lines(worker)), result
    assert_matches_one_process(reports, 12, 2)


def test_job_of_one_grows_and_the_new_worker_gets_model_and_optimizer_state(world, tmp_path):
    # Started alone, the optimizer must still be ready to average once the job grows.
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1"])
    result = world(1, WORKERS / "torch_elastic.py", "--steps", 10, "--grow", f"{hosts}:4",
                   timeout=120, launcher_args=["--min-np", "1", "--host-discovery-script",
                                               script, *FAST])
    assert result.returncode == 0, result
    assert "train from step 4 as rank 1 of 2" in "\n".join(result.lines(1)), result
    assert_matches_one_process(finals(result, [0, 1]), 10, 2)


def test_elastic_sampler_processes_each_sample_once_per_epoch_across_a_resize(world, tmp_path):
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"])
    result = world(2, WORKERS / "torch_sampler.py", "--grow", f"{hosts}:3", timeout=120,
                   launcher_args=["--min-np", "2", "--host-discovery-script", script, *FAST])
    assert result.returncode == 0, result
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
