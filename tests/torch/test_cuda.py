"""hvdlite.torch on CUDA tensors through NCCL (marked gpu): every collective and
a DistributedOptimizer step at world size 1, since NCCL cannot run several
ranks on one GPU; each check uses scale factors or poisoned outputs so that
it fails if hvdlite does nothing. Skips, saying why, only on machines without
a CUDA device (where NCCL does not load, it fails with the loader's message);
the CUDA path without a GPU is tested in tests/common/test_gpu_libraries.py,
and one GPU in depth, several ranks too, by tests/gpu/device_check.sh."""
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"


def _cuda_device_or_skip():
    torch = pytest.importorskip("torch", reason="no CUDA device: PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: torch.cuda.is_available() is False (CPU build of PyTorch, "
                    "or no GPU/driver on this machine)")


@pytest.mark.gpu
def test_every_collective_and_an_optimizer_step_on_cuda_tensors(world):
    _cuda_device_or_skip()
    result = world(1, WORKERS / "cuda_world1.py", timeout=300).expect_ok()
    assert "cuda collectives OK" in "".join(result.lines(0)), result
