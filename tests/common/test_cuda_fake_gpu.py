"""The core's CUDA path (csrc/core/device_executor.cc, csrc/transport/nccl/)
on real ranks over a fake CUDA runtime and NCCL that behave like the real ones
where it matters (tests/common/fake_gpu: streams that run later, collectives
that meet across processes, ncclCommAbort, allocation failures); see
workers/cuda_fake_behaviour.py for each mode. No GPU needed."""
import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fake_gpu"))
import fake_gpu_build as fake_gpu  # noqa: E402

WORKER = HERE / "workers" / "cuda_fake_behaviour.py"
pytestmark = pytest.mark.skipif(fake_gpu.compiler() is None, reason="no C compiler to build the fake GPU")


@pytest.fixture(scope="module")
def fake_env(tmp_path_factory):
    out = tmp_path_factory.mktemp("fake_gpu")
    return {"HVDLITE_NCCL_LIBRARY": str(fake_gpu.build(out, "fake_nccl.c", "libnccl.so.2", "libnccl.so.2")),
            "HVDLITE_CUDART_LIBRARY": str(fake_gpu.build(out, "fake_cudart.c", "libcudart.so.12",
                                                         "libcudart.so.12"))}


def _run(world, fake_env, np_, mode, timeout=90, **env):
    result = world(np_, WORKER, mode, timeout=timeout, env={**fake_env, **env})
    assert result.returncode == 0, result
    assert all(f"{mode} OK" in "".join(result.lines(r)) for r in range(np_)), result
    return result


@pytest.mark.parametrize("np_", [2, 3])
def test_results_are_ordered_by_events_and_a_fused_batch_costs_few_cuda_calls(world, fake_env, np_):
    result = _run(world, fake_env, np_, "ordering")
    assert "16 fused gradients cost" in "".join(result.lines(0)), result


def test_one_ranks_allocation_failure_fails_that_op_everywhere_and_the_next_works(world, fake_env):
    _run(world, fake_env, 3, "oom")


def test_a_rank_that_joins_first_binds_nccl_to_its_own_gpu(world, fake_env):
    _run(world, fake_env, 2, "join")


def test_half_precision_average_with_scales_and_a_subset_broadcast(world, fake_env):
    _run(world, fake_env, 3, "scale")


def test_an_allreduce_waits_only_for_work_queued_before_its_enqueue_and_overlaps_later_kernels(
        world, fake_env):
    result = _run(world, fake_env, 3, "overlap")
    assert "allreduce done" in "".join(result.lines(0)), result


def test_hierarchical_allreduce_on_two_fake_hosts_of_two_ranks(world, fake_env):
    _run(world, fake_env, 4, "hierarchical", HVDLITE_HIERARCHICAL_ALLREDUCE="1")


def test_a_rank_killed_mid_allreduce_fails_the_others_and_no_stream_hangs(world, fake_env):
    result = world(3, WORKER, "killed", timeout=90, env={**fake_env, "HVDLITE_NCCL_TIMEOUT_SECONDS": "20"})
    assert result.returncode != 0, result
    assert re.search(r"rank 2 .*signal 9", result.stderr), result
    for rank in (0, 1):
        out = "\n".join(result.lines(rank))
        found = re.search(rf"rank {rank} failed after ([0-9.]+) s: (.*)", out)
        assert found, result
        assert float(found.group(1)) < 15, result
        assert "rank 2" in found.group(2) and "allreduce of 'step." in found.group(2), result


def test_a_hung_nccl_kernel_fails_every_rank_after_the_timeout(world, fake_env):
    result = world(3, WORKER, "hang", timeout=90, env={**fake_env, "HVDLITE_NCCL_TIMEOUT_SECONDS": "2"})
    assert result.returncode != 0, result
    for rank in range(3):
        out = "\n".join(result.lines(rank))
        found = re.search(rf"rank {rank} failed after ([0-9.]+) s: (.*)", out)
        assert found, result
        assert float(found.group(1)) < 12, result
        text = found.group(2)
        assert "HVDLITE_NCCL_TIMEOUT_SECONDS" in text and re.search(r"allreduce of 'step\.\d'", text), result
        assert re.search(r"on rank \d \(GPU \d\)", text), result
