"""Several hosts for real, on network namespaces (namespaces.py): the
two-level allreduce across hosts (Note [Two-level allreduce]), a host that
vanishes without a reset (its link cut: packets just stop) failing every
surviving rank within seconds and naming it (Note [Socket tuning]), and a
long computation without collectives that must not look like one."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from namespaces import running_cluster
from test_launch_hosts import run_launcher
from test_launch_local import rank_lines

TESTS = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).resolve().parent / "workers"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("multihost")) as cluster:
        yield cluster


@pytest.mark.timeout(150)
@pytest.mark.parametrize("hosts,np_", [("localhost:2,hostA:2,hostB:2", 6)], ids=["3x2"])
def test_two_level_allreduce_across_real_hosts(cluster, hosts, np_):
    code, out, err = run_launcher(cluster, "-np", np_, "-H", hosts, sys.executable,
                                  TESTS / "common" / "workers" / "two_level.py", 2, "auto",
                                  "real", timeout=140)
    assert code == 0, err
    for rank, lines in rank_lines(out).items():
        assert f"rank {rank}: two-level auto OK (two levels" in lines[-1], (out, err)
    assert len(rank_lines(out)) == np_, out


@pytest.mark.timeout(120)
def test_a_blackholed_host_fails_every_surviving_rank_within_seconds(cluster):
    peer_timeout = 4
    command = cluster.launcher_command(sys.executable, "-m", "hvdlite.runner", "-np", 3,
                                       "-H", "localhost:1,hostA:1,hostB:1", sys.executable,
                                       WORKERS / "peer_timeout.py", "loop", peer_timeout)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    hostB_port = ["ip", "-n", cluster.namespaces["launcher"], "link", "set", "port1"]
    failures = {}
    try:
        running = 0
        for line in process.stdout:
            running += ": running" in line
            if running == 3:
                break
        time.sleep(1.0)  # a few steps go through first
        subprocess.run([*hostB_port, "down"], check=True, timeout=10)  # packets vanish
        cut_at = time.time()
        for line in process.stdout:
            if "failed_at" in line:
                report = json.loads(line.split(":", 1)[1])
                failures[report["rank"]] = report
            if len(failures) == 2:
                break
    finally:
        subprocess.run([*hostB_port, "up"], check=True, timeout=10)
        if process.poll() is None:
            process.kill()
        process.communicate()
    assert sorted(failures) == [0, 1], failures
    for rank, report in failures.items():
        waited = report["failed_at"] - cut_at
        print(f"rank {rank} failed {waited:.1f} s after hostB's link was cut: {report['error']}")
        assert waited < 15, (rank, waited, report)
        assert "lost host hostB" in report["error"], report
        assert "HVDLITE_PEER_TIMEOUT_SECONDS" in report["error"], report


@pytest.mark.timeout(90)
def test_a_long_step_without_collectives_is_not_a_lost_host(cluster):
    # Five peer timeouts of silence between two allreduces: keepalive is
    # answered by the computing rank's kernel.
    code, out, err = run_launcher(cluster, "-np", 2, "-H", "hostA:1,hostB:1", sys.executable,
                                  WORKERS / "peer_timeout.py", "long-step", 2, 10, timeout=80)
    assert code == 0, err
    assert all("long step OK" in lines[-1] for lines in rank_lines(out).values()), out
