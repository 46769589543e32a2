"""Tests on real GPUs (make test-gpu). Each skips, saying why, where there is
no CUDA device; the check is cheap, so `make test` passes over them quickly."""
import os
import shutil

import pytest


def _no_gpu_reason():
    if not (os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi")):
        return "no CUDA device: no /dev/nvidia0 and no nvidia-smi on this machine"
    try:
        import torch
    except ImportError:
        return "no CUDA device usable: PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False (CPU build of PyTorch, or no driver)"
    from hvdlite.common import basics
    if basics.nccl_built() == 0:
        return "no NCCL: pip install nvidia-nccl-cu12 (or set HVDLITE_NCCL_LIBRARY)"
    return None


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    mine = [item for item in items if str(item.fspath).startswith(here)]
    if not mine:
        return
    reason = _no_gpu_reason()
    for item in mine:
        item.add_marker(pytest.mark.gpu)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
