"""RayExecutor's elastic mode on a real Ray cluster on this machine
(ray.cluster_utils.Cluster, one CPU per node): a node added mid-job grows the
job, a node removed shrinks it, and the committed state survives both."""
import os
import threading
import time

import numpy as np
import pytest

from ray_cluster import local_cluster, wait_for_free_cpus  # skips the module without ray

from hvdlite.ray import RayExecutor, WorkerError

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(1, 1, test_module=__name__) as started:
        yield started


def count_ranks_until_stopped(progress, stop):
    """Each step records the job's size (an allreduce of ones) in the
    committed state; rank 0 reports progress to the test, which decides when
    the job ends (agreed on by every rank through an allreduce)."""
    import hvdlite.numpy as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(step=0, sizes=[])

    @hvd.elastic.run
    def train(state):
        while True:
            size = int(hvd.allreduce(np.ones(1), op=hvd.Sum, name="count")[0])
            stopping = os.path.exists(stop) if hvd.rank() == 0 else False
            stopping = hvd.allreduce(np.array([float(stopping)]), op=hvd.Sum, name="stop")[0]
            state.sizes.append(size)
            state.step += 1
            if hvd.rank() == 0:
                with open(progress + ".tmp", "w") as out:
                    out.write(f"{state.step} {hvd.size()}")
                os.replace(progress + ".tmp", progress)
            state.commit()
            if stopping or state.step >= 2000:
                return
            time.sleep(0.05)

    train(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "step": state.step, "sizes": state.sizes}


def test_grow_then_shrink_keeps_the_committed_state(cluster, tmp_path):
    progress, stop = str(tmp_path / "progress"), str(tmp_path / "stop")
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), min_workers=2,
                           max_workers=3, cpus_per_worker=1, elastic_timeout=60)
    executor.start()
    outcome = {}

    def run():
        try:
            outcome["results"] = executor.run(count_ranks_until_stopped, args=[progress, stop])
        except BaseException as error:  # reported by the test body
            outcome["error"] = error

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        wait_for_progress(progress, outcome, lambda step, size: size == 2 and step >= 3)
        third = cluster.add_node(num_cpus=1)
        grown_at = wait_for_progress(progress, outcome, lambda step, size: size == 3)
        wait_for_progress(progress, outcome, lambda step, size: step >= grown_at + 3)
        cluster.remove_node(third)
        shrunk_at = wait_for_progress(progress, outcome, lambda step, size: size == 2 and
                                      step > grown_at + 3)
        wait_for_progress(progress, outcome, lambda step, size: step >= shrunk_at + 3)
        open(stop, "w").close()
        runner.join(60)
        assert not runner.is_alive(), "the elastic run did not end after the stop file"
    finally:
        executor.shutdown()
        runner.join(30)
    assert "error" not in outcome, outcome.get("error")
    results = outcome["results"]
    assert [r["rank"] for r in results] == [0, 1] and all(r["size"] == 2 for r in results)
    sizes = results[0]["sizes"]
    # Every committed step is there once (no step lost or repeated by the
    # resets), and the history is 2s, then 3s, then 2s again.
    assert len(sizes) == results[0]["step"]
    assert all(r["sizes"] == sizes for r in results)
    changes = [size for i, size in enumerate(sizes) if i == 0 or sizes[i - 1] != size]
    assert changes == [2, 3, 2], sizes
    wait_for_free_cpus(2.0)


def wait_for_progress(path, outcome, condition, timeout=90):
    """Waits until rank 0's last report (step, size) satisfies `condition`;
    returns that step."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if "error" in outcome:
            raise outcome["error"]
        try:
            with open(path) as report:
                last = tuple(map(int, report.read().split()))
        except (FileNotFoundError, ValueError):
            last = None
        if last is not None and condition(*last):
            return last[0]
        time.sleep(0.1)
    pytest.fail(f"the elastic job did not get there within {timeout} s; last progress "
                f"(step, size): {last}")


def raise_in_step_three():
    import hvdlite.numpy as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(step=0)

    @hvd.elastic.run
    def train(state):
        while state.step < 1000:
            hvd.allreduce(np.ones(1), name="step")
            if hvd.rank() == 1 and state.step == 3:
                raise RuntimeError("loss diverged in step 3")
            state.step += 1
            state.commit()

    train(state)


def test_a_script_error_stops_the_elastic_job_naming_the_rank(cluster):
    # Not a lost worker: the job stops rather than re-forming around it.
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), min_workers=2,
                           max_workers=2, elastic_timeout=30)
    executor.start()
    try:
        with pytest.raises(WorkerError, match=r"rank 1 on Ray node .* failed: RuntimeError: "
                                              r"loss diverged in step 3"):
            executor.run(raise_in_step_three)
    finally:
        executor.shutdown()
    wait_for_free_cpus(2.0)
