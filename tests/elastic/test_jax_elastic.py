"""JAX elastic jobs (hvdlite.jax.elastic.JaxState) on real workers, a jitted
optax step, unsharded and with a sharded optimizer: a killed worker (3 -> 2)
and a discovered host that joins (2 -> 3) end with the parameters and the
whole optimizer state of one process's training."""
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("optax")

WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))
from elastic_jobs import (FAST, THREE_LOSING_ONE, discovery_script, finals,  # noqa: E402
                          survivors_of_killed_worker)

ENV = {"JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "1"}


def assert_matches_one_process(reports, steps, size):
    from reference import reference_optax
    for report in reports.values():
        assert report["step"] == steps and report["size"] == size, reports
        # Completed optimizer steps == committed steps: nothing lost, nothing twice.
        assert report["applied"] == steps, reports
    first = next(iter(reports.values()))
    for report in reports.values():  # identical parameters and state everywhere
        assert report["params"] == first["params"] and \
            report["opt_state"] == first["opt_state"], reports
    with jax.enable_x64(True):
        params, state = reference_optax(steps)
        expected = [np.asarray(v) for v in jax.tree_util.tree_leaves((params, state))]
    got = first["params"] + first["opt_state"]
    assert len(got) == len(expected), (got, expected)
    for value, reference in zip(got, expected):
        np.testing.assert_allclose(value, reference, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("stage", [0, 2], ids=["unsharded", "sharded"])
def test_killed_worker_of_three_survivors_restore_the_commit_and_finish_at_two(world, stage):
    result = world(3, WORKERS / "jax_elastic.py", "--steps", 10, "--kill", "1:5",
                   "--sharding-stage", stage, timeout=120, env=ENV,
                   launcher_args=THREE_LOSING_ONE).expect_ok()
    assert_matches_one_process(survivors_of_killed_worker(result, 5), 10, 2)


def test_discovered_host_joins_a_sharded_job_and_gets_its_rows(world, tmp_path):
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"])
    result = world(2, WORKERS / "jax_elastic.py", "--steps", 10, "--grow", f"{hosts}:4",
                   "--sharding-stage", 1, timeout=120, env=ENV,
                   launcher_args=["--min-np", "2", "--max-np", "3",
                                  "--host-discovery-script", script, *FAST]).expect_ok()
    assert "train from step 4 as rank 2 of 3" in "\n".join(result.lines(2)), result
    assert_matches_one_process(finals(result, [0, 1, 2]), 10, 3)
