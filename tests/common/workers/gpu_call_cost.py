"""What one small CUDA allreduce costs in CUDA and NCCL calls, counted by
the fake GPU by name (tests/common/fake_gpu; cudaEventQuery and
ncclCommGetAsyncError, which the watchdog polls, are not counted). Prints,
per case, "cost <case> <json>": the calls per collective, by name, and
"cost OK". tests/common/test_gpu_call_cost.py pins them (Note [Cost of a
call] in csrc/transport/cuda/cuda_communicator.h)."""
import ctypes
import json
import time

import numpy as np

import hvdlite.common.basics as basics
from hvdlite.common import init
from hvdlite.common.ops import OpType, ReduceOp
from fake_device import Caller, cudart, device_array, nccl, new_stream

cudart.fake_cuda_call_report.restype = ctypes.c_char_p
init()
rank = basics.rank()
cudart.cudaSetDevice(rank)
caller = Caller(rank, new_stream())
COUNT = 1024  # 4 KiB of float32
CALLS = 20


def calls_by_name():
    report = cudart.fake_cuda_call_report().decode()
    return {name: int(n) for name, n in (item.split("=") for item in report.split())}


def watchdog_bound(timeout=20):
    """Waits until the watchdog has made the rank's GPU current on its thread
    (once: cudaSetDevice there, as this thread and the background thread did
    before), so that it does not land in the counted calls on a slow machine."""
    deadline = time.monotonic() + timeout
    while calls_by_name().get("cudaSetDevice", 0) < 3:
        assert time.monotonic() < deadline, f"the watchdog did not bind within {timeout} s: {calls_by_name()}"
        time.sleep(0.05)


def measure(case, reduce_op, in_place):
    x = device_array(COUNT, np.float32)
    out = x if in_place else device_array(COUNT, np.float32)
    x[:] = rank + 1.0

    def one(i):
        caller.finish(caller.start(OpType.ALLREDUCE, f"{case}.{i % 2}", x, out=out, reduce_op=int(reduce_op)))

    for i in range(4):  # the first calls bind NCCL, fill the event pool and the operator cache
        one(i)
    watchdog_bound()
    before, nccl_before = calls_by_name(), nccl.fake_nccl_calls()
    for i in range(CALLS):
        one(i)
    after = calls_by_name()
    per_call = {name: (n - before.get(name, 0)) / CALLS for name, n in after.items() if n != before.get(name, 0)}
    per_call["nccl"] = (nccl.fake_nccl_calls() - nccl_before) / CALLS
    print(f"cost {case} {json.dumps(per_call)}", flush=True)


measure("sum", ReduceOp.Sum, in_place=True)
measure("average", ReduceOp.Average, in_place=True)
measure("sum_out_of_place", ReduceOp.Sum, in_place=False)
print("cost OK", flush=True)
