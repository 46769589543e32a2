"""Failures read from fields in every binding (workers/failure_fields.py): a
collective that fails inside tf.function or jax.jit surfaces as hvdlite's
typed exception with the core's fields, a shape mismatch and a killed peer
alike, which is what the elastic loops of hvdlite.tensorflow and
hvdlite.keras read (hvdlite.common.carried_failures.carried_failure)."""
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "failure_fields.py"


@pytest.mark.parametrize("framework", [
    pytest.param("tensorflow", marks=pytest.mark.tensorflow_ops), "jax"])
def test_a_compiled_steps_failure_carries_its_kind_and_fields(world, framework):
    pytest.importorskip(framework)
    result = world(2, WORKER, framework, timeout=180,
                   env={"JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"})
    for rank in range(2):
        assert f"rank {rank}: mismatch carried as CollectiveMismatchError" in result.lines(rank), \
            result
    result.expect_fast_failures([0], "PeerLostError", "ranks=(1,)", "tensors=('fields.step',)")
