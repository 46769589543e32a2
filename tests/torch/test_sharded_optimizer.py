"""hvdlite.torch.DistributedOptimizer(sharding_stage=1|2) on real ranks
against the unsharded DistributedOptimizer (tests/torch/workers/sharded_checks.py
holds the checks)."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).parent / "workers" / "sharded_checks.py"


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_sharded_matches_unsharded(world, np_):
    # SGD with momentum, Adam and AdamW, stages 1 and 2, 20 steps, uneven parameters.
    world(np_, WORKER, "check_equivalence", timeout=120).expect_ok().expect_line(
        "sharded OK", range(np_))


def test_sharded_options_checkpoints_and_errors(world):
    # Three ranks: passes, clipping, a process set of two, fp16, checkpoints
    # from 3 ranks into 2 and into unsharded torch, elastic state, refusals.
    checks = ["check_options", "check_process_set", "check_wrapping", "check_checkpoints",
              "check_elastic_state", "check_errors"]
    world(3, WORKER, *checks, timeout=180).expect_ok().expect_line("sharded OK", range(3))
