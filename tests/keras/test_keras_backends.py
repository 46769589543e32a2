"""hvdlite.keras on Keras 3's torch and JAX backends, on real ranks: the
TensorFlow backend's checks (workers/fit_and_callbacks.py: model.fit with
DistributedOptimizer against one process on the concatenated batch, the
callbacks, backward_passes_per_step, compression, load_model, helpers), with
KERAS_BACKEND set. On JAX they run inside Keras' jitted train step."""
from pathlib import Path

import pytest

pytest.importorskip("keras")

WORKER = Path(__file__).parent / "workers" / "fit_and_callbacks.py"


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_fit_callbacks_and_load_model_on_backend(world, backend):
    pytest.importorskip(backend)
    result = world(2, WORKER, timeout=300, env={"KERAS_BACKEND": backend,
                                                "JAX_PLATFORMS": "cpu"}).expect_ok()
    for rank in range(2):
        assert "keras OK" in result.lines(rank), result
