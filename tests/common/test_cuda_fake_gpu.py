"""The core's CUDA path (csrc/core/device_executor.cc, csrc/transport/cuda/,
csrc/transport/nccl/) on real ranks over a fake CUDA runtime and NCCL that
behave like the real ones where it matters (tests/common/fake_gpu: streams
that run later, collectives that meet across processes, ncclCommAbort,
allocation failures, graph capture, contexts per device) and that fail a
rank on any race (FAKE_CUDA_RACE_CHECK=1: a buffer read or written on a stream
not ordered after its last access, decided by stream order, not timing); see
workers/cuda_fake_behaviour.py and workers/cuda_fake_streams.py for each
mode. No GPU needed."""
import re
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fake_gpu"))
import fake_gpu_build as fake_gpu  # noqa: E402

WORKER = HERE / "workers" / "cuda_fake_behaviour.py"
STREAMS = HERE / "workers" / "cuda_fake_streams.py"
pytestmark = pytest.mark.skipif(fake_gpu.compiler() is None, reason="no C compiler to build the fake GPU")


@pytest.fixture(scope="module")
def fake_env(tmp_path_factory):
    return fake_gpu.environment(tmp_path_factory.mktemp("fake_gpu"), 12040, FAKE_CUDA_RACE_CHECK="1")


def _run(world, fake_env, np_, mode, timeout=90, worker=WORKER, **env):
    result = world(np_, worker, mode, timeout=timeout, env={**fake_env, **env})
    print(result)  # whole, in the report's captured output: an assertion's message is cut short
    result.expect_ok()
    assert all(f"{mode} OK" in "".join(result.lines(r)) for r in range(np_)), result
    return result


@pytest.mark.parametrize("np_", [2, 3])
def test_results_are_ordered_by_events_and_a_fused_batch_costs_few_cuda_calls(world, fake_env, np_):
    result = _run(world, fake_env, np_, "ordering")
    assert "16 fused gradients cost" in "".join(result.lines(0)), result


@pytest.mark.parametrize("np_", [2, 3])
def test_uneven_reducescatters_queued_together_fuse_and_are_ordered(world, fake_env, np_):
    result = _run(world, fake_env, np_, "fused_rs")
    # Unfused, each of the 20 costs a grouped reduce to each rank or one
    # ncclReduceScatter, about 80 calls; fused, some 15 (how many batches
    # form depends on when each cycle runs, so the bound is loose).
    calls = int(re.search(r"20 reducescatters cost (\d+) NCCL calls", "".join(result.lines(0))).group(1))
    assert calls < 40, result


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


def test_hierarchical_zero_element_allreduces_are_right_alone_without_memory_and_fused(world, fake_env):
    _run(world, fake_env, 4, "hier_empty", HVDLITE_HIERARCHICAL_ALLREDUCE="1")


def test_hierarchical_shutdown_waits_for_a_running_flat_broadcast_before_finalizing(world, fake_env):
    # A flat batch's done event is the flat communicator's: its close() votes
    # "finished" only once the broadcast ran (Note [Failing, not hanging]).
    result = _run(world, fake_env, 4, "hier_flat_shutdown", HVDLITE_HIERARCHICAL_ALLREDUCE="1",
                  HVDLITE_NCCL_TIMEOUT_SECONDS="5")
    assert "aborting NCCL" not in result.stderr, result


def test_hierarchical_watchdog_aborts_a_flat_broadcast_hung_at_shutdown(world, fake_env):
    started = time.monotonic()
    result = _run(world, fake_env, 4, "hier_flat_hang", HVDLITE_HIERARCHICAL_ALLREDUCE="1",
                  HVDLITE_NCCL_TIMEOUT_SECONDS="2")
    assert time.monotonic() - started < 30, result
    found = re.search(r"aborting NCCL: broadcast of 'flat\.hung' on rank \d \(GPU \d\) was queued on the GPU "
                      r"[0-9.]+ s ago and has not finished \(HVDLITE_NCCL_TIMEOUT_SECONDS=2", result.stderr)
    assert found, result


def test_a_rank_killed_mid_allreduce_fails_the_others_and_no_stream_hangs(world, fake_env):
    result = world(3, WORKER, "killed", timeout=90, env={**fake_env, "HVDLITE_NCCL_TIMEOUT_SECONDS": "20"})
    print(result)
    assert result.returncode != 0, result
    assert re.search(r"rank 2 .*signal 9", result.stderr), result
    for rank in (0, 1):
        out = "\n".join(result.lines(rank))
        found = re.search(rf"rank {rank} failed after ([0-9.]+) s: (.*)", out)
        assert found, result
        assert float(found.group(1)) < 15, result
        assert "rank 2" in found.group(2) and "allreduce of 'step." in found.group(2), result


def test_a_hung_nccl_kernel_fails_every_rank_after_the_timeout(world, fake_env, tmp_path):
    result = world(3, WORKER, "hang", timeout=90, env={**fake_env, "HVDLITE_NCCL_TIMEOUT_SECONDS": "2",
                                                       "CUDA_FAKE_FAILED_DIR": str(tmp_path)})
    print(result)
    assert result.returncode != 0, result
    for rank in range(3):
        out = "\n".join(result.lines(rank))
        found = re.search(rf"rank {rank} failed after ([0-9.]+) s: (.*)", out)
        assert found, result
        assert float(found.group(1)) < 12, result
        text = found.group(2)
        assert "HVDLITE_NCCL_TIMEOUT_SECONDS" in text and re.search(r"allreduce of 'step\.\d'", text), result
        assert re.search(r"on rank \d \(GPU \d\)", text), result


# --- stream order, contexts, capture, shutdown (workers/cuda_fake_streams.py)

@pytest.mark.parametrize("np_", [2, 3])
def test_a_result_is_right_on_the_stream_that_asks_for_it_and_an_unordered_read_is_caught(world, fake_env, np_):
    _run(world, fake_env, np_, "consumer", worker=STREAMS)


def test_a_ready_event_on_a_side_stream_is_caught_as_a_race(world, fake_env):
    _run(world, fake_env, 2, "side_ready", worker=STREAMS)


def test_nothing_waits_in_the_producers_stream_until_a_result_is_asked_for(world, fake_env):
    result = _run(world, fake_env, 2, "producer", worker=STREAMS)
    assert "results asked for on the producer's stream" in "".join(result.lines(0)), result


def test_each_rank_makes_one_cuda_context_on_its_own_gpu_with_the_watchdog_polling(world, fake_env):
    _run(world, fake_env, 3, "contexts", worker=STREAMS)


def test_a_graph_capture_survives_hvdlite_and_a_collective_inside_one_is_refused(world, fake_env):
    _run(world, fake_env, 2, "capture", worker=STREAMS)


@pytest.mark.parametrize("np_", [2, 3])
def test_a_c_api_request_is_ordered_on_its_stream_before_done_is_called(world, fake_env, np_):
    # Note [Ordered before done] in csrc/api/session.cc: the TF GPU kernels and
    # JAX's CUDA handler hand the result to the framework when done returns.
    result = _run(world, fake_env, np_, "c_api", worker=STREAMS)
    assert "C API results ordered on the request's stream" in "".join(result.lines(0)), result


def test_an_output_allocated_late_from_a_stream_ordered_allocator_is_written_after_that_stream(world, fake_env):
    # Note [Outputs allocated late] in csrc/api/session.cc (the TF GPU kernels').
    result = _run(world, fake_env, 2, "late_output", worker=STREAMS)
    assert "a late output is ordered after the framework's stream" in "".join(result.lines(0)), result


def test_nccl_enqueues_in_progress_settle_before_their_operators_go(world, fake_env):
    _run(world, fake_env, 3, "inprogress", worker=STREAMS, FAKE_NCCL_INPROGRESS="1")


def test_host_operations_run_every_collective_with_ranks_sharing_one_gpu_and_no_nccl(world, fake_env, tmp_path):
    _run(world, fake_env, 3, "host_ops", worker=STREAMS, HVDLITE_GPU_OPERATIONS="host",
         HVDLITE_NCCL_LIBRARY=str(tmp_path / "no_nccl_here.so"))


def test_horovods_mpi_gpu_operations_mean_host_staging(world, fake_env, tmp_path):
    _run(world, fake_env, 2, "host_ops", worker=STREAMS, HOROVOD_GPU_ALLREDUCE="MPI",
         HVDLITE_NCCL_LIBRARY=str(tmp_path / "no_nccl_here.so"))


def test_fusion_buffers_and_reducescatter_outputs_come_from_the_framework_allocator(world, fake_env):
    _run(world, fake_env, 3, "buffers", worker=STREAMS)


@pytest.mark.parametrize("version", [12040, 12080, 13000])
def test_a_fused_batch_is_copied_in_one_call_where_the_runtime_batches_copies(world, fake_env, tmp_path,
                                                                             version):
    cudart = fake_gpu.build_cudart(tmp_path, version)
    result = _run(world, fake_env, 2, "batched", worker=STREAMS, HVDLITE_CUDART_LIBRARY=str(cudart))
    assert f"CUDA {version}: a fused batch of 16 cost" in "".join(result.lines(0)), result


def test_one_rank_scaled_sums_are_right_to_the_last_element_despite_nccls_one_rank_kernel(world, fake_env):
    """Note [One-rank scaled sums]: the fake NCCL (version 2.20) leaves a
    1-rank premultiplied sum's tail unwritten as NCCL < 2.29.7 does
    (tests/common/test_fake_cuda.py shows it); the core splits the call."""
    _run(world, fake_env, 1, "one_rank", worker=STREAMS)
