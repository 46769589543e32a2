"""Tests hvdlite/runner/cluster.py's ClusterStore, the store of Ray and
Spark jobs: it listens only where it tells the workers to connect."""
import os

import pytest

from conftest import listening_addresses
from hvdlite.runner.cluster import ClusterStore
from hvdlite.store import StoreClient, StoreError, network


def test_a_one_host_jobs_store_listens_on_loopback_only():
    store = ClusterStore("192.0.2.7", start_timeout=5, single_host=True)  # Ray/Spark local mode
    try:
        assert store.address == "127.0.0.1"
        assert listening_addresses(os.getpid(), store.port) == {"127.0.0.1"}
        store.client.set("k", "v")
        assert store.environment("127.0.0.1")["HVDLITE_STORE_ADDR"] == "127.0.0.1"
    finally:
        store.close()


def test_a_cluster_jobs_store_listens_on_the_drivers_address_only():
    try:
        address = network.store_candidates()[0]
    except network.NetworkError as error:
        pytest.skip(f"needs a network address other than loopback: {error}")
    store = ClusterStore(address, start_timeout=5)
    try:
        assert listening_addresses(os.getpid(), store.port) == {address}
        assert store.environment(address)["HVDLITE_STORE_ADDR"] == address
        store.client.set("k", "v")  # the driver's own client goes there too
        with pytest.raises(StoreError, match="cannot connect"):
            StoreClient("127.0.0.1", store.port, store.secret, timeout=0.3)
    finally:
        store.close()
