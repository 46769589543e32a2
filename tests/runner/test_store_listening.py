"""Where the launcher's rendezvous store listens (Note [Listening where
offered] in hvdlite/store/server.py): on each address it offers and on
loopback, one socket each, never on the wildcard; across real hosts on
network namespaces (namespaces.py) whose launcher has two addresses."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import listening_addresses
from hvdlite.store import StoreClient, StoreServer
from namespaces import SUBNET, running_cluster

SECRET = "0123456789abcdef0123456789abcdef"
WORKER = Path(__file__).resolve().parent / "workers" / "report_store_port.py"
SECOND_LAUNCHER_ADDR = f"{SUBNET}.50"


def test_a_store_given_several_addresses_listens_on_each_on_one_port():
    # Linux routes all of 127.0.0.0/8 to loopback, so two addresses exist anywhere.
    with StoreServer(SECRET, host=["127.0.0.1", "127.0.0.2"]) as server:
        assert listening_addresses(os.getpid(), server.port) == {"127.0.0.1", "127.0.0.2"}
        assert server.addresses == ["127.0.0.1", "127.0.0.2"]
        for address in server.addresses:
            with StoreClient(address, server.port, SECRET, timeout=5) as client:
                client.add("seen", 1)
        with StoreClient("127.0.0.1", server.port, SECRET, timeout=5) as client:
            assert client.get("seen") == b"2"


def test_a_store_that_cannot_listen_on_one_address_says_which():
    with pytest.raises(OSError, match=r"203\.0\.113\.254"):
        StoreServer(SECRET, host=["127.0.0.1", "203.0.113.254"])  # TEST-NET-3: no host's


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("listening")) as cluster:
        # A second address on the launcher's network: offered too, so it
        # needs a socket of its own.
        subprocess.run(["ip", "-n", cluster.namespaces["launcher"], "addr", "add",
                        f"{SECOND_LAUNCHER_ADDR}/24", "dev", "eth0"], check=True, timeout=30)
        yield cluster


def listening_in_launcher(cluster, pid, port):
    """conftest.listening_addresses run in the launcher's namespace: psutil
    reads the sockets table of the namespace it runs in."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent.parent)!r}); "
            f"from conftest import listening_addresses; "
            f"print(sorted(listening_addresses({pid}, {port})))")
    result = cluster.run_in_launcher([sys.executable, "-c", code])
    return set(json.loads(result.stdout.replace("'", '"')))


@pytest.mark.timeout(120)
def test_hvdliterun_across_hosts_listens_only_on_the_addresses_it_offers(cluster, tmp_path):
    command = cluster.launcher_command(sys.executable, "-m", "hvdlite.runner", "-np", 2,
                                       "-H", "localhost:1,hostA:1", sys.executable, WORKER,
                                       tmp_path)
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # `ip netns exec` execs: the pid is hvdliterun's
    try:
        report = tmp_path / "port.json"
        deadline = time.monotonic() + 60
        while not report.exists() and launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert report.exists(), launcher.communicate(timeout=30) if launcher.poll() is not None \
            else "rank 0 did not report the store's port within 60 s"
        store = json.loads(report.read_text())
        listening = listening_in_launcher(cluster, launcher.pid, store["port"])
        assert listening == {"127.0.0.1", f"{SUBNET}.1", SECOND_LAUNCHER_ADDR}, listening
        assert store["reached"]["0"] == "127.0.0.1", store
        assert store["reached"]["1"] in {f"{SUBNET}.1", SECOND_LAUNCHER_ADDR}, store
        (tmp_path / "done").touch()
        out, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 0, err
        assert "rank 1: done" in out, out
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
