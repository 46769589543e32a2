"""Elastic jobs with workers on another host (hvdlite/runner/elastic/process_source.py,
through starter.py, remote.py and agent.py), on the network-namespace cluster of
tests/runner/namespaces.py: hvdliterun runs in the `launcher` namespace, and
`hostA` is a machine of its own (name, address, sshd, /dev/shm)."""
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parents[1]
WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))
sys.path.insert(0, str(TESTS / "runner"))

from conftest import run_launcher_command  # noqa: E402
from elastic_jobs import assert_trained, discovery_script, finals, states  # noqa: E402
from namespaces import HOSTS, LAUNCHER_ADDR, running_cluster  # noqa: E402
from reference import reference_weights  # noqa: E402
from test_launch_local import wait_until  # noqa: E402

FAST = ["--discovery-interval", "0.2", "--start-timeout", "20"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


def run_visited_job(cluster, tmp_path, add_at, remove_at, *worker_args):
    """A job that starts on this machine with 2 slots, where rank 0 adds
    hostA:1 to discovery at step `add_at` and removes it at `remove_at`."""
    script, hosts = discovery_script(tmp_path, ["localhost:2"])
    command = cluster.launcher_command(
        sys.executable, "-m", "hvdlite.runner", "-np", 2, "--min-np", 2, "--max-np", 3,
        "--host-discovery-script", script, "--verbose", *FAST,
        sys.executable, WORKERS / "numpy_elastic.py", "--steps", 10,
        "--visit", f"{hosts}:{add_at}:{remove_at}", "--visitor", "hostA:1", "--leave-segment",
        "--report-states", *worker_args)
    return run_launcher_command(command, "the job hostA visits", timeout=120)


def assert_nothing_left(cluster, job, result):
    """No process on hostA but its sshd listener, no segment of the job in
    /dev/shm there or here (each worker left one on purpose). The job has
    ended; what it started there ends within seconds, an sshd session of
    an earlier command too: wait for that, however long the machine's load
    makes it take (the deadline only bounds a real leak)."""
    assert wait_until(lambda: not cluster.leftovers("hostA"), timeout=60), \
        (cluster.leftovers("hostA"), result)
    assert f"hvdlite-{job}" not in cluster.run_on("hostA", "ls /dev/shm").stdout
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(f"hvdlite-{job}")]


@pytest.mark.timeout(150)
def test_job_grows_onto_a_remote_host_and_shrinks_back(cluster, tmp_path):
    result = run_visited_job(cluster, tmp_path, 3, 7).expect_ok()
    assert "re-forming the job at 3 rank(s) (round 1): hosts changed (localhost:2, " \
           "hostA:1)" in result.stderr, result
    assert "re-forming the job at 2 rank(s) (round 2): hosts changed (localhost:2)" \
        in result.stderr, result

    # Worker 2 ran on hostA, as rank 2 of 3, from the committed state of step 3.
    assert "train from step 3 as rank 2 of 3" in "\n".join(result.lines(2)), result
    visitor = states(result, 2)
    assert [s["step"] for s in visitor] == [4, 5, 6, 7], result
    for report in visitor:
        assert report["host"] == "hostA" and (report["rank"], report["size"]) == (2, 3)
        assert (report["local_rank"], report["cross_rank"]) == (0, 1), report
        np.testing.assert_allclose(report["weights"], reference_weights(report["step"]),
                                   rtol=1e-10, atol=1e-12)
    # ...with the very weights the workers here had at each step.
    here = {s["step"]: s["weights"] for s in states(result, 0) if s["size"] == 3}
    assert all(here[s["step"]] == s["weights"] for s in visitor), result
    layouts = {(s["rank"], s["local_rank"], s["cross_rank"], s["bind_addr"])
               for worker in (0, 1) for s in states(result, worker) if s["size"] == 3}
    # The workers here listened where hostA reaches this machine, hostA's
    # worker on the address its agent reached the store from.
    assert layouts == {(0, 0, 0, LAUNCHER_ADDR), (1, 1, 0, LAUNCHER_ADDR)}, result
    assert {s["bind_addr"] for s in visitor} == {HOSTS["hostA"]}, result
    assert f"host hostA (hostA) reached the store at {LAUNCHER_ADDR}" in result.stderr, result
    assert "is not part of round 2 of the elastic job" in "\n".join(result.lines(2, "stderr"))
    assert f"round 1: rank 0: worker 0 on localhost, rank 1: worker 1 on localhost, " \
           f"rank 2: worker 2 on hostA" in result.stderr, result

    # Workers 0 and 1 finished at 2 ranks, every step applied once.
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 1], result
    assert_trained(reports, 10, 2)

    assert_nothing_left(cluster, visitor[0]["job"], result)


@pytest.mark.timeout(150)
def test_killed_remote_worker_excludes_its_host_and_the_job_goes_on(cluster, tmp_path):
    # hostA joins at step 3; its worker (number 2) dies mid-step 5.
    result = run_visited_job(cluster, tmp_path, 3, 99, "--kill", "2:5").expect_ok()
    assert re.search(r"worker 2 \(rank 2 of round 1, host hostA, pid \d+\) was killed by signal "
                     r"9 \(SIGKILL\)\.", result.stderr), result
    assert "excluding host hostA from the job: worker 2 failed there" in result.stderr, result
    assert "re-forming the job at 2 rank(s) (round 2): worker 2 (host hostA" in result.stderr
    for worker in (0, 1):  # back to the commit of step 5, at 2 ranks
        assert "train from step 5 as rank" in "\n".join(result.lines(worker)), result
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 1], result
    assert_trained(reports, 10, 2)
    assert_nothing_left(cluster, states(result, 0)[0]["job"], result)
