"""hvdlite.tensorflow's Horovod API on real ranks: grouped_allgather and
grouped_reducescatter (and gradients), broadcast_, local variables,
PartialDistributedGradientTape, the util helpers."""
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow_ops

WORKER = Path(__file__).parent / "workers" / "grouped_and_local.py"


@pytest.mark.parametrize("np_", [2, 3])
def test_grouped_ops_broadcasts_partial_tape_and_util(world, np_):
    result = world(np_, WORKER, timeout=400, env={"TF_CPP_MIN_LOG_LEVEL": "2"}).expect_ok()
    for rank in range(np_):
        assert "tensorflow api OK" in result.lines(rank), result
