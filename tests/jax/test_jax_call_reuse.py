"""What the CPU handler keeps between calls (the names and shapes it read,
the call sites it interned) serves only a call like the last one: jitted
steps of the same names with other shapes, dtypes, names, process sets and
lines, in turn, against NumPy's results at 2 and 3 ranks (Note [Names read
once] in csrc/jax/collective_handler.cc, Note [Sites interned once] in
csrc/jax/collective_call.cc); and a merged step's lone call, which drives its
own cycles, in turn with a step of two calls traced in opposite orders on
alternate ranks (Note [A lone call drives itself] in csrc/jax/call_driver.cc)."""
from pathlib import Path

import pytest

pytest.importorskip("jax")

WORKER = Path(__file__).parent / "workers" / "jax_call_reuse.py"


@pytest.mark.parametrize("np_", [2, 3])
def test_what_a_call_keeps_never_outlives_a_change(world, np_):
    world(np_, WORKER, timeout=150, env={"JAX_PLATFORMS": "cpu"}).expect_ok().expect_line(
        "jax call reuse OK", range(np_))
