"""hvdlite.jax on real ranks: every collective against NumPy, eagerly and
inside jax.jit, pytree helpers, and optax's DistributedOptimizer against one
process on the concatenated batch."""
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

WORKER = Path(__file__).parent / "workers" / "jax_checks.py"


# 3 ranks (an odd size catches scaling bugs); tests/keras/test_keras_backends.py
# runs hvdlite.jax on 2 inside Keras' jitted train step.
@pytest.mark.parametrize("np_", [3])
def test_collectives_jit_and_optax(world, np_):
    result = world(np_, WORKER, timeout=180, env={"JAX_PLATFORMS": "cpu"})
    assert result.returncode == 0, result
    for rank in range(np_):
        assert "jax OK" in result.lines(rank), result
