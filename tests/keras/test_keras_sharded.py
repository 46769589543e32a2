"""hvdlite.keras.DistributedOptimizer(sharding_stage=1|2) on real ranks, one
worker run per Keras backend at 2 ranks (workers/keras_sharded.py: model.fit
against the unsharded optimizer in float64, compiled and eager, clipping,
accumulation, fp16, checkpoints, KerasState, refusals), and one run at 3
ranks on torch (a process set of 2, checkpoints across 3 ranks, 2 ranks and
an unsharded optimizer)."""
from pathlib import Path

import pytest

pytest.importorskip("keras")

WORKER = Path(__file__).parent / "workers" / "keras_sharded.py"
ENV = {"JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.mark.parametrize("backend", [
    pytest.param("tensorflow", marks=pytest.mark.tensorflow_ops), "torch", "jax"])
def test_sharded_optimizer_on_backend(world, backend):
    pytest.importorskip(backend)
    result = world(2, WORKER, timeout=300, env={**ENV, "KERAS_BACKEND": backend}).expect_ok()
    for rank in range(2):
        assert "keras sharded OK" in result.lines(rank), result


def test_sharded_optimizer_at_three_ranks(world):
    pytest.importorskip("torch")
    result = world(3, WORKER, "check_three_ranks", timeout=300,
                   env={**ENV, "KERAS_BACKEND": "torch"}).expect_ok()
    for rank in range(3):
        assert "keras sharded OK" in result.lines(rank), result
