"""A real multi-node Ray cluster on this machine for one test module
(ray.cluster_utils.Cluster), always torn down."""
import contextlib
import os
import sys
import time

import pytest

ray = pytest.importorskip("ray", reason="needs ray (pip install hvdlite[ray]; make venv installs it)")
from ray.cluster_utils import Cluster  # noqa: E402


@contextlib.contextmanager
def local_cluster(*node_cpus, test_module):
    """A head node with node_cpus[0] CPUs and one node for each further
    count; functions of `test_module` are shipped to the workers by value
    (Ray's worker processes cannot import a test module)."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[test_module])
    # Ranks must not inherit the test runner's import path.
    os.environ.pop("PYTHONPATH", None)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": node_cpus[0]})
    try:
        for cpus in node_cpus[1:]:
            cluster.add_node(num_cpus=cpus)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def wait_for_free_cpus(count, timeout=30):
    """Waits until `count` CPUs of the cluster are free again (ray.kill and
    removing a placement group free them asynchronously)."""
    deadline = time.monotonic() + timeout
    while ray.available_resources().get("CPU") != count:
        if time.monotonic() > deadline:
            pytest.fail(f"{count} CPUs were not free again within {timeout} s: an actor or "
                        f"placement group was left behind ({ray.available_resources()})")
        time.sleep(0.2)
