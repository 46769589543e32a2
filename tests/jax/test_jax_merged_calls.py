"""A jitted step's separate collectives lowered for the CPU merge into one
custom call where nothing can tell the difference (Note [One custom call for
a step's collectives] in hvdlite/jax/merged_calls.py): the lowered programs'
custom calls counted, every result against NumPy's at 2 and 3 ranks, the
size cap, and a failed member reported under its own name and line."""
from pathlib import Path

import pytest

pytest.importorskip("jax")

WORKER = Path(__file__).parent / "workers" / "jax_merged_calls.py"
ENV = {"JAX_PLATFORMS": "cpu"}


@pytest.mark.parametrize("np_", [2, 3])
def test_separate_collectives_merge_only_where_nothing_can_tell(world, np_):
    world(np_, WORKER, timeout=150, env=ENV).expect_ok().expect_line("jax merged calls OK", range(np_))


def test_the_fusion_threshold_caps_a_merged_call(world):
    env = {**ENV, "HOROVOD_FUSION_THRESHOLD": str(64 * 1024)}
    world(2, WORKER, "cap", timeout=120, env=env).expect_ok().expect_line("jax merged calls OK", range(2))


def test_a_failed_member_is_reported_under_its_own_name_and_line(world):
    world(2, WORKER, "failure", timeout=120, env=ENV).expect_ok().expect_line("failed member reported", range(2))
