"""A GPU per rank however the cluster shows GPUs, and a GPU shared by two
ranks named on every rank (csrc/core/rank_device.h,
csrc/transport/cuda/gpu_identity.h), on the fake GPU; see
workers/gpu_device_choice.py for each mode. No GPU needed."""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fake_gpu"))
import fake_gpu_build as fake_gpu  # noqa: E402

WORKER = HERE / "workers" / "gpu_device_choice.py"
pytestmark = pytest.mark.skipif(fake_gpu.compiler() is None, reason="no C compiler to build the fake GPU")


@pytest.fixture(scope="module")
def fake_env(tmp_path_factory):
    return fake_gpu.environment(tmp_path_factory.mktemp("fake_gpu"), HVDLITE_NCCL_TIMEOUT_SECONDS="20")


@pytest.mark.parametrize("mode,np_", [("one_each", 2), ("all", 3), ("too_few", 3), ("shared", 2), ("mig", 2)])
def test_each_rank_finds_its_own_gpu_or_is_told_why_it_cannot(world, fake_env, mode, np_):
    # The info log says, at the first CUDA tensor, what the rank sees and NCCL's settings.
    env = {**fake_env, "HVDLITE_LOG_LEVEL": "info", "NCCL_SOCKET_IFNAME": "fake0"} if mode == "one_each" else fake_env
    result = world(np_, WORKER, mode, timeout=90, env=env)
    print(result)
    result.expect_ok()
    assert all(f"{mode} OK" in "".join(result.lines(r)) for r in range(np_)), result
    if mode == "one_each":
        for rank in range(np_):
            assert (f"GPUs: local rank {rank} of {np_} sees 1 (CUDA_VISIBLE_DEVICES={rank}); NCCL's settings: "
                    "NCCL_SOCKET_IFNAME=fake0") in str(result), result
