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


@pytest.fixture(scope="module")
def three_rank_job():
    """One 3-rank job of jax_checks.py's checks and then jax_powersgd.py's
    (starting JAX ranks costs more than most checks); each prints its line. A
    failed check ends the job, so PowerSGD's line is then missing too."""
    from conftest import run_ranks
    return run_ranks(3, WORKER, "powersgd", timeout=240, env={"JAX_PLATFORMS": "cpu"})


# 3 ranks (an odd size catches scaling bugs); tests/keras/test_keras_backends.py
# runs hvdlite.jax on 2 inside Keras' jitted train step.
@pytest.mark.parametrize("np_", [3])
def test_collectives_jit_and_optax(three_rank_job, np_):
    three_rank_job.expect_line("jax OK", range(np_))


# PowerSGD (hvdlite/jax/powersgd.py) on 3 ranks: exact at full rank, error
# feedback that loses nothing, eager = jit, checkpoints, backward passes, a
# process set, training within 1 % of uncompressed, misuse refused.
def test_powersgd_compression(three_rank_job):
    # Last in the job: its exit is the job's.
    three_rank_job.expect_line("powersgd OK", range(3)).expect_ok()


# One process without the FFI handler (no compiler, or HVDLITE_JAX_FFI=0): jit
# still works, through the io_callback, and an unwanted fallback is logged once.
FALLBACK_PROBE = """
import jax, jax.numpy as jnp
import hvdlite.jax as hvd
hvd.init()
print(jax.jit(lambda a: hvd.allreduce(a, op=hvd.Sum))(jnp.ones(2)).tolist())
print(jax.jit(lambda a: hvd.allgather(a))(jnp.ones(2)).tolist())
print(hvd.jit_path())
hvd.shutdown()
"""


@pytest.mark.parametrize("why", ["no compiler", "HVDLITE_JAX_FFI=0"])
def test_falls_back_to_io_callback(tmp_path, why):
    env = dict(os.environ, HVDLITE_CACHE_DIR=str(tmp_path), JAX_PLATFORMS="cpu")
    if why == "no compiler":
        env.update(CXX="", PATH=str(tmp_path))
    else:
        env["HVDLITE_JAX_FFI"] = "0"
    out = subprocess.run([sys.executable, "-c", FALLBACK_PROBE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[1.0,", "1.0]", "[1.0,", "1.0]", "io_callback"], out.stdout
    warnings = out.stderr.count("fall back to an ordered io_callback")
    if why == "no compiler":
        assert warnings == 1 and "no C++ compiler was found" in out.stderr, out.stderr
    else:  # chosen on purpose: no warning, nothing compiled
        assert warnings == 0 and not list(tmp_path.iterdir()), out.stderr


def test_killed_rank_fails_the_jitted_step_fast(world):
    result = world(2, WORKER.parent / "jax_killed_rank.py", timeout=120,
                   env={"JAX_PLATFORMS": "cpu"})
    result.expect_fast_failures([0], "killed.grad", "rank 1")
    assert "rank 0 jit path ffi" in result.lines(0), result  # the step blocked in the FFI call
