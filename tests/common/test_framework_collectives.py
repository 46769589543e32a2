"""The collectives that behave the same in every binding, one test body over
an adapter per framework (workers/framework_collectives.py): numpy, torch,
TensorFlow and JAX against NumPy on 3 ranks (an odd size shows scaling bugs),
and the same bad arguments refused in the same words by every binding,
eagerly and inside tf.function and jax.jit (Note [One way in] in
csrc/api/session.h). Each framework's own tests keep what only it has
(graphs, jit, autograd)."""
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "framework_collectives.py"


@pytest.mark.parametrize("framework", [
    "numpy", "torch", pytest.param("tensorflow", marks=pytest.mark.tensorflow_ops), "jax"])
def test_basic_collectives_match_numpy_in_every_framework(world, framework):
    pytest.importorskip(framework)
    result = world(3, WORKER, framework, timeout=240,
                   env={"JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}).expect_ok()
    for rank in range(3):
        assert f"rank {rank}: {framework} collectives OK" in result.lines(rank), result
