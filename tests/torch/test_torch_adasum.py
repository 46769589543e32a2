"""op=hvd.Adasum in hvdlite.torch: allreduce, grouped_allreduce and
DistributedOptimizer (hvdlite/torch/adasum_optimizer.py) on 2 and 4 real
ranks against NumPy/torch references, and the errors on 3 ranks
(tests/torch/workers/adasum_checks.py holds the checks)."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).parent / "workers" / "adasum_checks.py"


@pytest.mark.parametrize("np_", [2, 4, 3])
def test_adasum_matches_references_or_explains_why_not(world, np_):
    result = world(np_, WORKER, timeout=240).expect_ok()
    result.expect_line("torch adasum OK", range(np_))
