"""hvdlite.ray.RayExecutor, static and elastic, on a real two-node Ray
cluster on this machine (ray.cluster_utils.Cluster: a head node with 2 CPUs
and a node with 1; one cluster for the whole module, always torn down; the
elastic test adds and removes a third node)."""
import os
import re
import signal
import socket
import threading
import time

import numpy as np
import pytest

from failure_shape import failure_pattern
from ray_cluster import local_cluster, wait_for_free_cpus  # skips the module without ray

from hvdlite.ray import RayExecutor, WorkerError

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(2, 1, test_module=__name__) as started:
        yield started


@pytest.fixture
def executor_factory(cluster):
    started = []

    def make(start=None, **options):
        executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), **options)
        started.append(executor)
        executor.start(**(start or {}))
        return executor

    yield make
    for executor in started:
        executor.shutdown()


def layout_and_allreduce():
    import hvdlite.numpy as hvd
    hvd.init()
    try:
        data = np.arange(6, dtype=np.float32) * (hvd.rank() + 1)
        summed = hvd.allreduce(data, op=hvd.Sum, name="layout")
        return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
                "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
                "cross_size": hvd.cross_size(), "sum": summed.tolist(),
                "host": os.environ["HVDLITE_HOSTNAME"], "bind": os.environ["HVDLITE_BIND_ADDR"]}
    finally:
        hvd.shutdown()


def expected_sum(size):
    return (np.arange(6, dtype=np.float32) * sum(range(1, size + 1))).tolist()


def test_three_workers_over_two_nodes(executor_factory):
    executor = executor_factory(num_workers=3, cpus_per_worker=1)
    results = executor.run(layout_and_allreduce)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["size"] == 3 and r["sum"] == expected_sum(3) for r in results)
    # PACK fills the 2-CPU head first: ranks 0 and 1 share it, rank 2 is alone;
    # cross ranks count the nodes that have a given local rank.
    assert results[0]["host"] == results[1]["host"] != results[2]["host"]
    assert [(r["local_rank"], r["local_size"]) for r in results] == [(0, 2), (1, 2), (0, 1)]
    assert [(r["cross_rank"], r["cross_size"]) for r in results] == [(0, 2), (0, 1), (1, 2)]
    # The same actors run the next function (a new init() after shutdown()).
    assert executor.run(layout_and_allreduce) == results


def thread_settings():
    import hvdlite.numpy as hvd
    hvd.init()
    hvd.shutdown()
    return os.environ.get("OMP_NUM_THREADS"), os.environ.get("HVDLITE_THREADS_CHOSEN")


def test_ranks_sharing_a_node_keep_rays_thread_count(executor_factory):
    """Ray sets OMP_NUM_THREADS to the CPUs an actor reserved, and hvdlite,
    init() included, keeps it (Note [Threads per rank] in hvdlite/common/threads.py)."""
    executor = executor_factory(num_workers=2, cpus_per_worker=1)
    assert executor.run(thread_settings) == [("1", None)] * 2


def test_two_hosts_one_worker_each_and_a_clean_shutdown(cluster):
    # nics: the ranks listen on that interface's address on their node.
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30, nics="lo"), num_hosts=2,
                           num_workers_per_host=1)
    executor.start()
    try:
        store_port, job_id = executor._store.port, executor._store.job_id
        results = executor.run(layout_and_allreduce)
        assert [(r["rank"], r["local_rank"], r["cross_rank"], r["cross_size"])
                for r in results] == [(0, 0, 0, 2), (1, 0, 1, 2)]
        assert results[0]["host"] != results[1]["host"]
        assert [r["bind"] for r in results] == ["127.0.0.1", "127.0.0.1"]
        assert all(r["sum"] == expected_sum(2) for r in results)
        # execute() runs on the instances start() made.
        assert executor.execute(lambda executable: executable) == [None, None]
    finally:
        executor.shutdown()
    # No actor or placement group holds a CPU any more, and the store is closed.
    wait_for_free_cpus(3.0)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", store_port), timeout=5).close()
    assert [name for name in os.listdir("/dev/shm") if job_id in name] == []


class Trainer:
    def __init__(self, scale):
        self.scale = scale


def test_executable_class_and_execute_single(executor_factory):
    executor = executor_factory(num_workers=2, start={"executable_cls": Trainer,
                                                      "executable_args": [3]})

    def scaled_sum(trainer):
        import hvdlite.numpy as hvd
        hvd.init()
        try:
            return hvd.allreduce(np.array([trainer.scale * (hvd.rank() + 1.0)]), op=hvd.Sum,
                                 name="scaled").tolist()
        finally:
            hvd.shutdown()

    assert executor.execute(scaled_sum) == [[9.0], [9.0]]
    assert executor.execute_single(lambda trainer: trainer.scale) == 3


def raise_on_rank_one():
    import hvdlite.numpy as hvd
    hvd.init()
    try:
        if hvd.rank() == 1:
            raise ValueError("bad batch on rank one")
        hvd.allreduce(np.ones(4), name="never_complete")
    finally:
        hvd.shutdown()


def test_a_raising_worker_is_reported_with_rank_and_node(executor_factory):
    executor = executor_factory(num_workers=3)
    # The shape every launcher reports a failure in (tests/runner/test_failure_rule.py).
    with pytest.raises(WorkerError, match=failure_pattern(
            1, "ray", r"raised ValueError: bad batch on rank one")) as raised:
        executor.run(raise_on_rank_one)
    assert raised.value.rank == 1


def kill_rank_two_mid_run():
    import hvdlite.numpy as hvd
    hvd.init()
    for step in range(1000):
        if step == 5 and hvd.rank() == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(np.ones(4), name=f"step{step % 3}")
    hvd.shutdown()


def test_a_killed_actor_fails_the_run_naming_it(executor_factory):
    executor = executor_factory(num_workers=3)
    job_id = executor._store.job_id
    with pytest.raises(WorkerError, match=failure_pattern(2, "ray",
                                                          r"was lost: its Ray actor died")):
        executor.run(kill_rank_two_mid_run)
    executor.shutdown()
    assert [name for name in os.listdir("/dev/shm") if job_id in name] == []


def test_gpu_workers_see_every_gpu_ray_gave_their_node():
    from hvdlite.ray.placement import visible_devices
    nodes = [("a", "10.0.0.1", ["10"]), ("a", "10.0.0.1", ["2"]), ("b", "10.0.0.2", ["0"]),
             ("c", "10.0.0.3", [])]
    assert visible_devices(nodes) == {"a": "2,10", "b": "0"}


# --- elastic --------------------------------------------------------------


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
    # The job starts on all 3 CPUs, grows to 4 with a node of 1 CPU and
    # shrinks back when that node is removed.
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), min_workers=2,
                           max_workers=4, cpus_per_worker=1, elastic_timeout=60)
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
        wait_for_progress(progress, outcome, lambda step, size: size == 3 and step >= 3)
        added = cluster.add_node(num_cpus=1)
        grown_at = wait_for_progress(progress, outcome, lambda step, size: size == 4)
        wait_for_progress(progress, outcome, lambda step, size: step >= grown_at + 3)
        cluster.remove_node(added)
        shrunk_at = wait_for_progress(progress, outcome, lambda step, size: size == 3 and
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
    assert [r["rank"] for r in results] == [0, 1, 2] and all(r["size"] == 3 for r in results)
    sizes = results[0]["sizes"]
    # Every committed step is there once (no step lost or repeated by the
    # resets), and the history is 3s, then 4s, then 3s again.
    assert len(sizes) == results[0]["step"]
    assert all(r["sizes"] == sizes for r in results)
    changes = [size for i, size in enumerate(sizes) if i == 0 or sizes[i - 1] != size]
    assert changes == [3, 4, 3], sizes
    wait_for_free_cpus(3.0)


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


def one_cpu_node():
    """The id of the live node with one CPU (the head has two)."""
    import ray
    return next(node["NodeID"] for node in ray.nodes()
                if node["Alive"] and node["Resources"].get("CPU") == 1.0)


def size_changes(sizes):
    return [size for i, size in enumerate(sizes) if i == 0 or sizes[i - 1] != size]


def train_with_a_doomed_node(doomed_node, steps, kill_at=None, raise_after=None):
    """Commits `steps` steps, recording the job's size at each. The worker on
    `doomed_node` dies by SIGKILL in step `kill_at`, or raises `raise_after`
    steps after it (re)joined; with raise_after the job instead runs until
    it has shrunk twice and gone on for `steps` more steps."""
    import ray
    import hvdlite.numpy as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(step=0, sizes=[])
    doomed = ray.get_runtime_context().get_node_id() == doomed_node

    def done():
        if raise_after is None:
            return state.step >= steps
        shrinks = [i for i in range(1, len(state.sizes)) if state.sizes[i] < state.sizes[i - 1]]
        return len(shrinks) >= 2 and state.step >= shrinks[-1] + steps or state.step >= 3000

    @hvd.elastic.run
    def train(state):
        joined_at = state.step
        while not done():
            if doomed and state.step == kill_at:  # the others wait in this step's allreduce
                os.kill(os.getpid(), signal.SIGKILL)
            size = int(hvd.allreduce(np.ones(1), op=hvd.Sum, name="count")[0])
            if doomed and raise_after is not None and state.step == joined_at + raise_after:
                raise OSError("the scratch disk of this node is failing")
            state.sizes.append(size)
            state.step += 1
            state.commit()
            time.sleep(0.02)

    train(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "step": state.step, "sizes": state.sizes}


def test_a_killed_actor_excludes_its_node_and_the_job_finishes_on_the_others(cluster, capfd):
    doomed = one_cpu_node()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), min_workers=2,
                           max_workers=3, elastic_timeout=60)
    executor.start()
    try:
        results = executor.run(train_with_a_doomed_node, args=[doomed, 30], kwargs={"kill_at": 5})
    finally:
        executor.shutdown()
    err = capfd.readouterr().err
    assert [(r["rank"], r["size"], r["step"]) for r in results] == [(0, 2, 30), (1, 2, 30)], err
    # Steps 0-4 at 3 ranks; step 5 was lost with the worker and redone at 2,
    # from the commit; the node stayed out (no cooldown range).
    assert all(r["sizes"] == [3] * 5 + [2] * 25 for r in results), (results, err)
    assert re.search(r"worker \d \(rank \d of round 0, Ray node [\d.]+ \(\w+\)\) was lost: its "
                     r"Ray actor died", err), err
    assert f"excluding Ray node " in err and f"({doomed[:12]}) from the job: worker" in err, err
    wait_for_free_cpus(3.0)


def test_an_actor_that_raises_again_after_its_cooldown_is_excluded_twice_as_long(cluster, capfd):
    # Whenever a worker runs on the doomed node it raises two steps later: the
    # node comes back after 2 to 3 s (Note [Cooldown length]), fails again,
    # and stays out for 4 s, the range's end; the job goes on at 2 ranks each
    # time and finishes.
    doomed = one_cpu_node()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), min_workers=2,
                           max_workers=3, elastic_timeout=60, cooldown_range=(1, 4))
    executor.start()
    try:
        results = executor.run(train_with_a_doomed_node, args=[doomed, 5],
                               kwargs={"raise_after": 2})
    finally:
        executor.shutdown()
    err = capfd.readouterr().err
    assert [(r["rank"], r["size"]) for r in results] == [(0, 2), (1, 2)], err
    sizes = results[0]["sizes"]
    assert all(r["sizes"] == sizes for r in results) and len(sizes) == results[0]["step"]
    assert size_changes(sizes) == [3, 2, 3, 2], (sizes, err)
    raised = re.findall(r"worker (\d) \(rank \d of round \d+, Ray node [\d.]+ \(\w+\)\) raised "
                        r"OSError: the scratch disk of this node is failing", err)
    assert len(raised) == 2 and raised[0] != raised[1], err
    cooldowns = re.findall(rf"excluding Ray node [\d.]+ \({doomed[:12]}\) for (\d) s", err)
    assert cooldowns[0] in ("2", "3") and cooldowns[1:] == ["4"], err
    assert "the cooldown of excluded Ray node(s)" in err, err
    wait_for_free_cpus(3.0)


def raise_everywhere_in_step_three():
    import hvdlite.numpy as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(step=0)

    @hvd.elastic.run
    def train(state):
        while state.step < 1000:
            hvd.allreduce(np.ones(1), name="step")
            if state.step == 3:
                raise RuntimeError("loss diverged in step 3")
            state.step += 1
            state.commit()

    train(state)


def test_an_error_on_every_worker_stops_the_elastic_job_at_once(cluster):
    # A script error that fails every worker of the round: the job stops with
    # the first one's error, without waiting elastic_timeout for new nodes.
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), min_workers=2,
                           max_workers=2, elastic_timeout=120)
    executor.start()
    started = time.monotonic()
    try:
        with pytest.raises(WorkerError, match=r"rank [01] \(Ray node .*\) raised RuntimeError: "
                                              r"loss diverged in step 3") as raised:
            executor.run(raise_everywhere_in_step_three)
    finally:
        executor.shutdown()
    assert time.monotonic() - started < 60
    assert isinstance(raised.value.__cause__, RuntimeError)
    wait_for_free_cpus(3.0)
