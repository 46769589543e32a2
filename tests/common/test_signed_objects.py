"""broadcast_object / allgather_object unpickle only what a rank of the job
signed (Note [Signed objects] in hvdlite/numpy/objects.py)."""
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "signed_objects.py"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("np_", [2, 3])
def test_a_pickle_that_fails_its_tag_is_refused_and_never_runs(world, tmp_path, np_):
    marker = tmp_path / "planted-code-ran"
    result = world(np_, WORKER, marker, timeout=100).expect_ok()
    for rank in range(np_):
        assert f"rank {rank}: signed objects OK" in result.lines(rank), result
    # The forged object runs only where it was made (rank 0 unpickles its own).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["planted-code-ran.0"]
