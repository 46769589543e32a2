"""Several hosts for real, on network namespaces (namespaces.py): the
two-level allreduce across hosts (Note [Two-level allreduce]), a host that
vanishes without a reset (its link cut: packets just stop) failing every
surviving rank within seconds and naming it (Note [Socket tuning]), or,
in an elastic job, leaving it without that host, and a long computation
without collectives that must not look like one."""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from namespaces import running_cluster
from test_launch_hosts import run_launcher
from test_launch_local import rank_lines, wait_until

TESTS = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(TESTS / "elastic"))
sys.path.insert(0, str(TESTS / "elastic" / "workers"))

from conftest import RankResult  # noqa: E402
from elastic_jobs import assert_trained, discovery_script, finals, states  # noqa: E402
from reference import reference_weights  # noqa: E402


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
    printed = rank_lines(out)
    assert sorted(printed) == [0, 1], out  # all() over no rank would pass
    assert all("long step OK" in lines[-1] for lines in printed.values()), out


class StreamedJob:
    """A launcher command whose output lines the test reads as they come,
    each with the time.time() it arrived."""

    def __init__(self, command, env=None):
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env)
        self.lines = {"stdout": [], "stderr": []}
        self._readers = [threading.Thread(target=self._read, args=(name,), daemon=True)
                         for name in self.lines]
        for reader in self._readers:
            reader.start()

    def _read(self, name):
        for line in getattr(self.process, name):
            self.lines[name].append((time.time(), line.rstrip("\n")))

    def first(self, stream, predicate):
        """(time, line) of the first line of `stream` that satisfies predicate, or None."""
        return next(((at, line) for at, line in list(self.lines[stream]) if predicate(line)),
                    None)

    def result(self, timeout):
        """Waits for the launcher to exit (killing it after `timeout` s) and
        returns a RankResult, or fails the test if it hung."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
        for reader in self._readers:
            reader.join(10)
        result = RankResult(self.process.returncode,
                            *("\n".join(line for _, line in self.lines[name]) + "\n"
                              for name in ("stdout", "stderr")))
        assert result.returncode is not None and result.returncode >= 0, \
            f"hvdliterun did not finish within {timeout} s (hang?)\n{result}"
        return result


@pytest.mark.timeout(90)
def test_an_elastic_job_goes_on_without_a_blackholed_host(cluster, tmp_path):
    """hostB's link is cut mid-training (its ssh session stays open, its
    worker keeps running, discovery still lists it): the survivors fail
    within the peer timeout naming hostB, the driver excludes hostB, and the
    job goes on from the last commit at 2 ranks."""
    peer_timeout, steps = 3, 60
    host_pids = cluster.pids()  # the sshds (and what an earlier test's hosts still end)
    script, _ = discovery_script(tmp_path, ["localhost:1", "hostA:1", "hostB:1"])
    command = cluster.launcher_command(
        sys.executable, "-m", "hvdlite.runner", "-np", 3, "--min-np", 2, "--max-np", 3,
        "--host-discovery-script", script, "--discovery-interval", 0.5,
        "--start-timeout", 20, "--verbose", sys.executable,
        TESTS / "elastic" / "workers" / "numpy_elastic.py", "--steps", steps,
        "--step-time", 0.1, "--report-states")
    job = StreamedJob(command, env={**os.environ,
                                    "HVDLITE_PEER_TIMEOUT_SECONDS": str(peer_timeout)})
    hostB_port = ["ip", "-n", cluster.namespaces["launcher"], "link", "set", "port1"]
    try:
        # Worker 2, on hostB, is rank 2 of round 0; cut its link after step 5.
        assert wait_until(lambda: job.first("stdout", lambda line: line.startswith(
            '[2]<stdout>:state {"step": 5,')), timeout=40), job.result(1)
        subprocess.run([*hostB_port, "down"], check=True, timeout=10)  # packets vanish
        cut_at = time.time()
        result = job.result(timeout=60)
        # What the job ended without waiting for (hostB's agent and worker).
        left_on_B = cluster.pids() - host_pids
    finally:
        subprocess.run([*hostB_port, "up"], check=True, timeout=10)
        link_up = time.time()
        if job.process.poll() is None:
            job.process.kill()
    result.expect_ok()
    lost = job.first("stderr", lambda line: "excluding host hostB" in line)
    reset = job.first("stderr", lambda line: "re-forming the job at 2 rank(s) (round 1)" in line)
    assert lost and reset, result
    assert "host hostB stopped answering: rank " in lost[1], lost
    assert "lost host hostB: rank 2 there" in lost[1], lost
    assert "giving up its worker(s) 2 without waiting for them" in lost[1], lost
    assert "round 1: rank 0: worker 0 on localhost, rank 1: worker 1 on hostA" in result.stderr
    print(f"hostB's link cut: the driver gave it up {lost[0] - cut_at:.1f} s later, round 1 "
          f"was published {reset[0] - cut_at:.1f} s later")
    assert reset[0] - cut_at < peer_timeout + 4, (reset[0] - cut_at, result)

    # Both survivors went back to their last commit (no later than hostB's
    # step 5) and trained on at 2 ranks; every step applied exactly once.
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 1], result
    assert_trained(reports, steps, 2)
    for worker in (0, 1):
        seen = states(result, worker)
        for report in seen:
            np.testing.assert_allclose(report["weights"], reference_weights(report["step"]),
                                       rtol=1e-10, atol=1e-12)
        at_3 = [s["step"] for s in seen if s["size"] == 3]
        assert at_3[-1] >= 5 and [s["step"] for s in seen if s["size"] == 2] == \
            list(range(at_3[-1] + 1, steps + 1)), result
        assert f"train from step {at_3[-1]} as rank {worker} of 2" in result.lines(worker), result

    # With the link back, what hostB still ran learns that the job went on
    # without it and ends.
    assert wait_until(lambda: not cluster.pids() - host_pids, timeout=30), \
        (cluster.pids() - host_pids, result)
    print(f"the job ended {link_up - cut_at:.1f} s after the cut, leaving {len(left_on_B)} "
          f"process(es) in the cluster (hostB's); they ended {time.time() - link_up:.1f} s "
          f"after its link came back")
