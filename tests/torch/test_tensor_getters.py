"""The one call's tensor reads through torch's getters follow changes to
torch.Tensor, and allreduce_ of one tensor takes its own lane (Note [Tensor
attributes read through their getters], Note [The in-place allreduce's own
lane] in csrc/python/torch_one_call.cc)."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKERS = Path(__file__).parent / "workers"


def test_getters_follow_changes_to_torch_tensor(world):
    result = world(1, WORKERS / "tensor_getters_checks.py", timeout=120).expect_ok()
    assert "tensor getters OK" in "\n".join(result.lines(0)), result
