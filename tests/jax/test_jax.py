"""hvdlite.jax on real ranks: every collective against NumPy, eagerly and
inside jax.jit (the XLA FFI custom call, and the io_callback fallback), their
order, pytree helpers, and optax's DistributedOptimizer against one process on
the concatenated batch."""
import os
import subprocess
import sys
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


# One process: no compiler means no FFI handler; jit still works through the
# io_callback, and the log says why, once.
FALLBACK_PROBE = """
import jax, jax.numpy as jnp
import hvdlite.jax as hvd
hvd.init()
print(jax.jit(lambda a: hvd.allreduce(a, op=hvd.Sum))(jnp.ones(2)).tolist())
print(jax.jit(lambda a: hvd.allgather(a))(jnp.ones(2)).tolist())
print(hvd.jit_path())
hvd.shutdown()
"""


def test_falls_back_to_io_callback_without_a_compiler(tmp_path):
    env = dict(os.environ, HVDLITE_CACHE_DIR=str(tmp_path), CXX="", PATH=str(tmp_path),
               JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", FALLBACK_PROBE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[1.0,", "1.0]", "[1.0,", "1.0]", "io_callback"], out.stdout
    assert out.stderr.count("fall back to an ordered io_callback") == 1, out.stderr
    assert "no C++ compiler was found" in out.stderr, out.stderr
