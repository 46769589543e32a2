"""The CUDA and NCCL calls one small CUDA allreduce makes, pinned so that the
cost of a call cannot creep back (Note [Cost of a call] in
csrc/transport/cuda/cuda_communicator.h); counted by the fake GPU, see
workers/gpu_call_cost.py. No GPU needed."""
import json
import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fake_gpu"))
import fake_gpu_build as fake_gpu  # noqa: E402

pytestmark = pytest.mark.skipif(fake_gpu.compiler() is None, reason="no C compiler to build the fake GPU")

# Per collective: at enqueue the capture check (cudaStreamIsCapturing) and
# the ready event; on the background thread NCCL's wait for it, the NCCL call
# and the done event; at synchronize() the consumer stream's wait; an output
# other than the input adds its copy. Average is the same one NCCL call: its
# premultiplied-sum operator is made once (Note [Scaled-sum operators]).
# Nothing else: no cudaSetDevice, no operator created or destroyed.
PINNED = {"capture_and_graph_calls": 1, "cudaEventRecord": 2, "cudaStreamWaitEvent": 2, "nccl": 1}
COPY = {"cudaMemcpyAsync": 1}
# The test's own cudaStreamSynchronize (the host reads the result), and the
# event pool growing while the watchdog has not yet returned done events
# (each new event: cudaGetDevice, cudaEventCreateWithFlags): amortised, not per call.
NOT_THE_CALLS = {"cudaStreamSynchronize"}
POOL_GROWTH = ("cudaGetDevice", "cudaEventCreateWithFlags")


@pytest.mark.parametrize("np_", [1, 2])
def test_a_small_allreduce_costs_five_cuda_calls_and_one_nccl_call(world, tmp_path, np_):
    env = fake_gpu.environment(tmp_path, 12040)
    result = world(np_, HERE / "workers" / "gpu_call_cost.py", timeout=90, env=env)
    print(result)
    result.expect_ok()
    for rank in range(np_):
        lines = result.lines(rank)
        text = "".join(lines)
        costs = {m.group(1): json.loads(m.group(2)) for m in map(re.compile(r"cost (\w+) (\{.*\})").search, lines)
                 if m}
        assert set(costs) == {"sum", "average", "sum_out_of_place"}, text
        for case, calls in costs.items():
            growth = [calls.pop(name, 0) for name in POOL_GROWTH]
            assert growth[0] == growth[1], (case, growth)
            mine = {name: n for name, n in calls.items() if name not in NOT_THE_CALLS}
            want = {**PINNED, **(COPY if case == "sum_out_of_place" else {})}
            assert mine == want, (f"rank {rank}, {case}: per call {mine}, pinned {want}; a new call per "
                                  f"collective costs every training step (Note [Cost of a call])")
