"""hvdlite.torch's broadcast helpers, SyncBatchNorm and join() with uneven
batches on real ranks (tests/torch/workers/helpers_checks.py holds the checks)."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).parent / "workers" / "helpers_checks.py"


@pytest.mark.parametrize("np_", [2, 3])
def test_broadcasts_sync_batch_norm_and_join(world, np_):
    result = world(np_, WORKER, timeout=180)
    assert result.returncode == 0, result
    for rank in range(np_):
        assert "helpers OK" in result.lines(rank), result
