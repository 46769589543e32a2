"""hvdlite.torch's broadcast helpers, SyncBatchNorm and join() with uneven
batches on real ranks (tests/torch/workers/helpers_checks.py holds the checks)."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).parent / "workers" / "helpers_checks.py"
# Three ranks: uneven batch sizes, a process set of two, two ranks joining early.
RANKS = 3


def test_broadcasts_sync_batch_norm_and_join(world):
    world(RANKS, WORKER, timeout=180).expect_ok().expect_line("helpers OK", range(RANKS))


def test_optimizer_state_broadcast_at_two_ranks(world):
    # The three-rank run above covers these too; two ranks is the even case.
    world(2, WORKER, "check_broadcast_model_and_optimizer",
          "check_optimizer_state_without_gradients", "check_fresh_optimizer_state",
          "check_non_tensor_state", timeout=180).expect_ok().expect_line("helpers OK", range(2))
