"""hvdlite.ray.RayExecutor on a real two-node Ray cluster on this machine
(ray.cluster_utils.Cluster: a head node with 2 CPUs and a node with 1; one
cluster for the whole module, always torn down)."""
import os
import signal
import socket

import numpy as np
import pytest

from ray_cluster import local_cluster, wait_for_free_cpus  # skips the module without ray

from hvdlite.ray import RayExecutor, WorkerError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(2, 1, test_module=__name__) as started:
        yield started


@pytest.fixture
def executor_factory(cluster):
    started = []

    def make(**options):
        executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), **options)
        started.append(executor)
        executor.start()
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
    executor = executor_factory(num_workers=2)
    executor.shutdown()
    executor.start(executable_cls=Trainer, executable_args=[3])

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
    with pytest.raises(WorkerError, match=r"rank 1 on Ray node .* failed: "
                                          r"ValueError: bad batch on rank one") as raised:
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
    with pytest.raises(WorkerError, match=r"rank 2 on Ray node .* failed: its Ray actor died"):
        executor.run(kill_rank_two_mid_run)
    executor.shutdown()
    assert [name for name in os.listdir("/dev/shm") if job_id in name] == []


def test_gpu_workers_see_every_gpu_ray_gave_their_node():
    from hvdlite.ray.placement import visible_devices
    nodes = [("a", "10.0.0.1", ["10"]), ("a", "10.0.0.1", ["2"]), ("b", "10.0.0.2", ["0"]),
             ("c", "10.0.0.3", [])]
    assert visible_devices(nodes) == {"a": "2,10", "b": "0"}
