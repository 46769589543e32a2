"""Note [Late joiners] (hvdlite/common/late_joiners.py, csrc/api/solo.h): a
worker that joins a running elastic job and submits collectives before it
enters hvd.elastic.run never costs the job. An allreduce or broadcast
completes on it alone, with one warning per call site; a collective whose
result it cannot compute alone fails it alone, its slot is excluded, and
the others finish. Each job ends with the weights of one process trained
through the same membership changes (reference.py)."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest

WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))
from reference import reference_torch, reference_weights  # noqa: E402

from elastic_jobs import discovery_script, finals  # noqa: E402

FAST = ["--discovery-interval", "0.2", "--start-timeout", "20"]
JOINER = 2  # workers 0 and 1 start on 127.0.0.1 and .2; worker 2 joins on .3 at step 4
JOINED = f"worker 127.0.0.3/0/{JOINER} (rank 2 of 3), which joined round 1 of a running " \
         f"elastic job,"


def grown_job(world, tmp_path, worker, *args, env=None):
    """2 workers that grow onto 127.0.0.3 at step 4 of 10; its result."""
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"])
    return world(2, WORKERS / worker, "--steps", 10, "--grow", f"{hosts}:4", *args,
                 timeout=120, env=env,
                 launcher_args=["--min-np", "2", "--max-np", "3",
                                "--host-discovery-script", script, *FAST])


def assert_same_weights(reports, size, expected, rtol=1e-10):
    assert {r["step"] for r in reports.values()} == {10}, reports
    assert {r["size"] for r in reports.values()} == {size}, reports
    first = next(iter(reports.values()))["weights"]
    assert all(r["weights"] == first for r in reports.values()), reports  # identical
    np.testing.assert_allclose(first, expected, rtol=rtol, atol=1e-12)


def assert_warned_once(result, op, file):
    """The joiner's one warning for its call site of `op` in `file`."""
    text = "\n".join(result.lines(JOINER, "stderr"))
    warnings = re.findall(rf"{re.escape(JOINED)} called {op} '[^']*' at \S*{file}:\d+ in "
                          rf"\w+\(\) before entering hvd\.elastic\.run; it completed on this "
                          rf"worker alone", text)
    assert warnings and len(warnings) == len(set(warnings)), result
    assert "This is harmless: run() calls state.sync() first" in text, result


def assert_joiner_failed_alone(result, collective, file):
    result.expect_ok()
    text = "\n".join(result.lines(JOINER, "stderr"))
    assert re.search(rf"exceptions\.CollectiveOutsideRunError: {re.escape(JOINED)} called "
                     rf"{collective} at \S*{file}:\d+", text), result
    assert "call collectives only inside the function that hvd.elastic.run wraps" in text
    assert f"excluding slot 0 of host 127.0.0.3 from the job: worker {JOINER} failed there " \
           f"before entering hvd.elastic.run" in result.stderr, result
    assert "the job stops" not in result.stderr, result
    # The next round waits for the joiner's exit instead of taking it in again.
    assert "re-forming the job at 2 rank(s) (round 2)" in result.stderr, result
    reports = finals(result, [0, 1, JOINER])
    assert sorted(reports) == [0, 1], result
    return reports


def test_alone_an_allreduce_and_broadcast_are_the_workers_own_and_an_allgather_fails(world):
    # One process, alone as a late joiner is (late_joiners.begin): what a
    # one-rank job gives, scale factors included, and the refusals.
    result = world(1, WORKERS / "alone_collectives.py", timeout=60).expect_ok()
    out = "\n".join(result.lines(0))
    assert "allreduce [0.0, 6.0, 12.0, 18.0]" in out, result
    assert "average [0.0, 1.0, 2.0, 3.0]" in out and "broadcast [0.0, 1.0, 2.0, 3.0]" in out
    assert "optimizer state {'lr': 0.5}" in out, result  # hvdlite's own broadcast_object
    assert "allgather CollectiveOutsideRunError" in out, result
    assert "allgather_object CollectiveOutsideRunError" in out, result
    assert "script's broadcast_object CollectiveOutsideRunError" in out, result
    assert "after end: allgather [0.0, 1.0, 2.0, 3.0]" in out, result
    assert len(re.findall(r"called allreduce 'sum' at \S*alone_collectives\.py:\d+",
                          result.stderr)) == 1, result  # once per call site, not per call


def test_alone_on_a_gpu_a_result_is_a_copy_ordered_on_the_frameworks_stream(world, tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common" / "fake_gpu"))
    import fake_gpu_build
    if fake_gpu_build.compiler() is None:
        pytest.skip("no C compiler to build the fake GPU")
    env = fake_gpu_build.environment(tmp_path, 12040, FAKE_CUDA_RACE_CHECK="1")
    result = world(1, WORKERS / "cuda_fake_alone.py", timeout=60, env=env).expect_ok()
    assert "alone OK" in result.lines(0), result


@pytest.fixture
def torch_job(world, tmp_path):
    pytest.importorskip("torch")
    return lambda *args: grown_job(world, tmp_path, "torch_elastic.py", *args)


@pytest.fixture(scope="module")
def torch_broadcast_and_step_job(tmp_path_factory):
    """One grown torch job whose workers broadcast, then take a step, before
    run() (as a ported static script does both): each of the two tests below
    checks its own call of the joiner's. One job, not two: a torch job is
    most of either test's time."""
    pytest.importorskip("torch")
    from conftest import run_ranks
    return grown_job(run_ranks, tmp_path_factory.mktemp("joiners"), "torch_elastic.py",
                     "--broadcast-first", "--step-first")


def assert_torch_trained(reports, size, steps_before_run=0):
    weights, momentum = reference_torch(10 + steps_before_run)
    assert_same_weights(reports, size, weights)
    for report in reports.values():
        assert report["applied"] == 10, reports  # nothing lost, nothing twice
        np.testing.assert_allclose(report["momentum"], momentum, rtol=1e-10, atol=1e-12)


def test_torch_joiners_top_level_broadcast_completes_alone(torch_broadcast_and_step_job):
    result = torch_broadcast_and_step_job.expect_ok()
    assert_warned_once(result, "broadcast", "torch_elastic.py")
    assert "train from step 4 as rank 2 of 3" in "\n".join(result.lines(JOINER)), result
    assert_torch_trained(finals(result, [0, 1, JOINER]), 3, steps_before_run=1)


def test_torch_joiners_top_level_step_with_distributed_optimizer_completes_alone(
        torch_broadcast_and_step_job):
    result = torch_broadcast_and_step_job.expect_ok()
    assert_warned_once(result, "allreduce", "torch_elastic.py")
    assert_torch_trained(finals(result, [0, 1, JOINER]), 3, steps_before_run=1)


def test_torch_joiners_allgather_fails_it_alone_and_the_job_finishes(torch_job):
    reports = assert_joiner_failed_alone(torch_job("--allgather-first"), "allgather 'rows'",
                                         "torch_elastic.py")
    assert_torch_trained(reports, 2)


@pytest.fixture
def tf_job(world, tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    return lambda *args: grown_job(world, tmp_path, "tf_late_joiner.py", *args,
                                   env={"KERAS_BACKEND": "tensorflow"})


@pytest.mark.tensorflow_ops
def test_tensorflow_joiners_top_level_broadcast_and_train_step_complete_alone(tf_job):
    # As Horovod's tensorflow2_synthetic_benchmark_elastic.py: a tf.function
    # step with DistributedGradientTape before run(), traced then and run
    # again inside it; and broadcast_variables kept from a static script.
    result = tf_job("--before-run", "broadcast,step").expect_ok()
    assert_warned_once(result, "broadcast", "tf_late_joiner.py")
    assert_warned_once(result, "allreduce", "tf_late_joiner.py")
    # Keras keeps the learning rate in float32: 0.1 is not exact there.
    assert_same_weights(finals(result, [0, 1, JOINER]), 3, reference_weights(11), rtol=1e-6)


@pytest.mark.tensorflow_ops
def test_tensorflow_joiners_allgather_fails_it_alone_and_the_job_finishes(tf_job):
    reports = assert_joiner_failed_alone(tf_job("--before-run", "allgather"), "allgather 'rows'",
                                         "tf_late_joiner.py")
    assert_same_weights(reports, 2, reference_weights(10), rtol=1e-6)
