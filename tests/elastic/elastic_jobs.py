"""What the elastic tests share: reading the workers' reports, checking
their training against one process's, and writing a discovery script whose
hosts a test (or a worker) can edit."""
import json

import numpy as np

THREE_HOSTS = "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1"
# A fast discovery and start on loopback hosts.
FAST = ["--discovery-interval", "0.2", "--start-timeout", "20"]
# The launcher's arguments of a job of three workers, one per host, that may
# lose one of them.
THREE_LOSING_ONE = ["--min-np", "2", "-H", THREE_HOSTS, *FAST]


def finals(result, workers):
    """{worker: its last "final <json>" report}, for the workers that printed one."""
    reports = {}
    for worker in workers:
        lines = [line for line in result.lines(worker) if line.startswith("final ")]
        if lines:
            reports[worker] = json.loads(lines[-1][len("final "):])
    return reports


def survivors_of_killed_worker(result, step):
    """{worker: final report} of a THREE_LOSING_ONE job whose worker 1 (host
    127.0.0.2) killed itself in `step`: the launcher said so, and workers 0
    and 2, the only ones to finish, went on from the commit of that step."""
    assert "worker 1 (rank 1 of round 0, host 127.0.0.2" in result.stderr, result
    reports = finals(result, [0, 1, 2])
    assert sorted(reports) == [0, 2], result
    for worker in (0, 2):
        assert f"train from step {step} as rank" in "\n".join(result.lines(worker)), result
    return reports


def states(result, worker):
    """The "state <json>" reports of a worker (numpy_elastic.py --report-states)."""
    return [json.loads(line[len("state "):]) for line in result.lines(worker)
            if line.startswith("state ")]


def assert_trained(reports, steps, size):
    """Reports of numpy_elastic.py workers that trained `steps` steps at `size`."""
    from reference import reference_weights  # tests/elastic/workers, on sys.path
    assert {r["step"] for r in reports.values()} == {steps}, reports
    assert {r["size"] for r in reports.values()} == {size}, reports
    weights = [np.array(r["weights"]) for r in reports.values()]
    for w in weights[1:]:
        assert np.array_equal(w, weights[0]), reports  # identical on every rank
    # Every committed step applied exactly once: full-batch descent, N steps.
    np.testing.assert_allclose(weights[0], reference_weights(steps), rtol=1e-10, atol=1e-12)


def discovery_script(tmp_path, hosts):
    """(script, hosts file): the script prints the file, which starts with `hosts`."""
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("\n".join(hosts) + "\n")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts_file}\n")
    script.chmod(0o755)
    return script, hosts_file
