"""Keras 3 elastic model.fit (hvdlite.keras.elastic) survives a killed worker,
on the TensorFlow, torch and JAX backends, with PowerSGD's state committed
and restored with the model's, and with a sharded optimizer re-sharded for
the survivors."""
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("keras")

WORKERS = Path(__file__).parent / "workers"


def run_killed_worker(world, backend, *options):
    """3 workers, worker 1 killed in epoch 1: the job's result and the 2
    survivors' reports."""
    result = world(3, WORKERS / "keras_elastic.py", *options, timeout=240,
                   env={"KERAS_BACKEND": backend},
                   launcher_args=["--min-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1",
                                  "--discovery-interval", "0.2"]).expect_ok()
    reports = {}
    for worker in (0, 2):
        out = "\n".join(result.lines(worker))
        # Resumed in epoch 1 (where worker 1 died), from the last commit.
        assert "fit from epoch 1 as rank" in out, result
        reports[worker] = json.loads(out.rsplit("final ", 1)[1].splitlines()[0])
    return result, reports


@pytest.mark.parametrize("backend,compression", [
    pytest.param("tensorflow", [], marks=pytest.mark.tensorflow_ops), ("torch", []), ("jax", []),
    pytest.param("tensorflow", ["--powersgd"], marks=pytest.mark.tensorflow_ops)],
    ids=["tensorflow", "torch", "jax", "tensorflow-powersgd"])
def test_fit_with_elastic_callbacks_survives_a_killed_worker(world, backend, compression):
    pytest.importorskip(backend)
    result, reports = run_killed_worker(world, backend, *compression)
    assert "worker 1 (rank 1 of round 0, host 127.0.0.2" in result.stderr, result
    assert not result.lines(1) or "final" not in "\n".join(result.lines(1)), result
    assert reports[0] == reports[2], reports  # same weights on both survivors
    assert reports[0]["epoch"] == 4 and reports[0]["size"] == 2, reports
    if not compression:
        # The same failure with a sharded optimizer (stage 2): KerasState
        # commits the sharded state whole at 3 ranks and re-shards it at 2, and
        # the survivors end where this unsharded run ended.
        _, sharded = run_killed_worker(world, backend, "--sharding-stage", "2")
        assert sharded[0]["epoch"] == 4 and sharded[0]["size"] == 2, sharded
        assert sharded[0]["weights"] == sharded[2]["weights"], sharded
        for got, want in zip(sharded[0]["values"], reports[0]["values"]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if compression:
        # Committed at epoch 1's batch 2 (4 + 2 steps of 16 rows at 3 ranks),
        # restored there, then epochs 1-3 at 2 ranks: 3 x 6 steps. Without
        # the restore, the step that failed would count too.
        assert reports[0]["powersgd_steps"] == 4 + 2 + 3 * 6, reports
