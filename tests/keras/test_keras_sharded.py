"""hvdlite.keras.DistributedOptimizer(sharding_stage=1|2) at 3 ranks on torch
(workers/keras_sharded.py's check_three_ranks: a process set of 2,
checkpoints across 3 ranks, 2 ranks and an unsharded optimizer). Its 2-rank
checks on each Keras backend (model.fit against the unsharded optimizer in
float64, compiled and eager, clipping, accumulation, fp16, checkpoints,
KerasState, refusals) run in test_keras_backends.py, in one job per backend
with the other Keras 3 workers."""
from pathlib import Path

import pytest

pytest.importorskip("keras")

WORKER = Path(__file__).parent / "workers" / "keras_sharded.py"
ENV = {"JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}


def test_sharded_optimizer_at_three_ranks(world):
    pytest.importorskip("torch")
    result = world(3, WORKER, "check_three_ranks", timeout=300,
                   env={**ENV, "KERAS_BACKEND": "torch"}).expect_ok()
    for rank in range(3):
        assert "keras sharded OK" in result.lines(rank), result
