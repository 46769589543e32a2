"""hvdlite.torch on real CUDA tensors through NCCL, one rank per GPU (1 to all
GPUs of the machine): the cases tests/common/test_cuda_fake_gpu.py runs on
the fake GPU, plus overlap of an early gradient's allreduce with backward.
See workers/gpu_cases.py. Run with `make test-gpu`; one GPU is checked in
more depth by tests/gpu/device_check.sh.

Skipped, saying why, only where there is no CUDA device. Where there is one,
nothing else skips: if NCCL or the CUDA runtime cannot be loaded, the tests
fail with the loader's message."""
import os
import re
import shutil
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "gpu_cases.py"


def _no_gpu_reason():
    """Why these tests cannot run here, or None. Cheap where there is no GPU
    (no torch import), so `make test` passes over them quickly."""
    if not (os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi")):
        return "no CUDA device: no /dev/nvidia0 and no nvidia-smi on this machine"
    try:
        import torch
    except ImportError:
        return "no CUDA device usable: PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False (CPU build of PyTorch, or no driver)"
    return None


# Module-level marks, not a tests/gpu/conftest.py: a second conftest module
# would shadow tests/conftest.py for the tests that `from conftest import ...`.
_REASON = _no_gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]


def _ranks(at_least):
    import torch
    n = torch.cuda.device_count()
    if n < at_least:
        pytest.skip(f"needs {at_least} GPUs, this machine has {n}")
    return n


@pytest.mark.parametrize("mode", ["ordering", "collectives", "scale", "oom", "join", "allocator"])
@pytest.mark.parametrize("size", ["one", "all"])
def test_case_on_real_gpus(world, mode, size):
    if size == "one" and mode in ("join", "oom"):
        pytest.skip(f"{mode} needs 2 ranks: at one rank there is no other to join or to tell")
    np_ = 1 if size == "one" else _ranks(2)
    result = world(np_, WORKER, mode, timeout=300).expect_ok()
    assert all(f"{mode} OK" in "".join(result.lines(r)) for r in range(np_)), result


def test_a_killed_rank_fails_the_others_without_hanging_a_gpu(world):
    np_ = _ranks(2)
    result = world(np_, WORKER, "killed", timeout=180, env={"HVDLITE_NCCL_TIMEOUT_SECONDS": "30"})
    assert result.returncode != 0, result
    for rank in range(np_ - 1):
        out = "\n".join(result.lines(rank))
        found = re.search(rf"rank {rank} failed after ([0-9.]+) s: (.*)", out)
        assert found and float(found.group(1)) < 40, result


@pytest.mark.parametrize("size", ["one", "all"])
def test_an_early_gradients_allreduce_finishes_before_backward_ends(world, size):
    np_ = 1 if size == "one" else _ranks(2)
    result = world(np_, WORKER, "overlap", timeout=300).expect_ok()
    assert all("overlap OK" in "".join(result.lines(r)) for r in range(np_)), result
