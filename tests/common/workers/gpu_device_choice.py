"""Which GPU a rank takes however the cluster shows it GPUs (Note [A GPU per
rank] in csrc/core/rank_device.h) and what a GPU shared by two ranks of one
NCCL communicator gives (Note [A GPU shared by two ranks] in
csrc/transport/cuda/gpu_identity.h), on the fake GPU (4 physical devices;
it honours CUDA_VISIBLE_DEVICES, which each rank sets for itself here, before
anything loads CUDA). One mode per run (argv[1]); prints "<mode> OK".

  one_each    every rank sees one GPU, a different one (Slurm
              --gpus-per-task=1): it is "GPU 0" on every rank; the last
              rank joins before any CUDA tensor of its own, so the core's
              own choice binds NCCL, and it must be that GPU 0, not the
              local rank (which this rank cannot even see)
  all         every rank sees every GPU: the same, and the joined rank's
              NCCL is on its local rank's GPU
  too_few     every rank sees 2 GPUs but the host has 3 ranks: the first CUDA
              tensor raises ValueError naming the visible devices and the fix
  shared      every rank sees the same one GPU: the first CUDA allreduce fails
              on every rank, naming the ranks, the GPU and
              HVDLITE_GPU_OPERATIONS=host, before NCCL is asked
  mig         every rank sees a MIG instance of its own, of one GPU
              (FAKE_CUDA_MIG=1): the same failure
"""
import os
import sys

MODE = sys.argv[1]
LOCAL = int(os.environ["HVDLITE_LOCAL_RANK"])
VISIBLE = {"one_each": str(LOCAL), "too_few": "0,1", "shared": "2", "mig": str(LOCAL)}
if MODE in VISIBLE:
    os.environ["CUDA_VISIBLE_DEVICES"] = VISIBLE[MODE]
else:
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
if MODE == "mig":
    os.environ["FAKE_CUDA_MIG"] = "1"

import numpy as np  # noqa: E402

import hvdlite.common.basics as basics  # noqa: E402
from hvdlite.common import init  # noqa: E402
from hvdlite.common.exceptions import HvdliteInternalError  # noqa: E402
from hvdlite.common.ops import DataType, OpType, ReduceOp  # noqa: E402
from fake_device import Caller, cudart, device_array, nccl, new_stream  # noqa: E402

init()
rank, size = basics.rank(), basics.size()
# The device a script pins (too_few: any it can see; the core refuses first).
EXPECTED_DEVICE = {"all": LOCAL, "too_few": LOCAL % 2}.get(MODE, 0)
cudart.cudaSetDevice(EXPECTED_DEVICE)
caller = Caller(EXPECTED_DEVICE, new_stream())
core = caller.core
F32 = int(DataType.FLOAT32)


def allreduce(name, value):
    x = device_array(4, np.float32)
    x[:] = value
    caller.finish(caller.start(OpType.ALLREDUCE, name, x, reduce_op=int(ReduceOp.Sum)))
    return x


def each_rank_on_its_own_gpu():
    if rank == size - 1:
        core.wait(core.enqueue(op=int(OpType.JOIN), name="__join"), int(DataType.INT32))
        # Bound by the core's own choice: this rank queued no CUDA tensor.
        assert nccl.fake_nccl_last_comm_device() == EXPECTED_DEVICE, \
            (nccl.fake_nccl_last_comm_device(), EXPECTED_DEVICE)
    else:
        x = allreduce("joined", rank + 1.0)
        assert np.all(x == sum(range(1, size))), x
        core.wait(core.enqueue(op=int(OpType.JOIN), name="__join"), int(DataType.INT32))
    x = allreduce("after", 1.0)
    assert np.all(x == size), x


def too_few():
    try:
        allreduce("x", 1.0)
    except ValueError as error:
        text = str(error)
        for part in ("allreduce of 'x'", f"local rank {LOCAL} of {size}", "sees 2 GPUs (0, 1",
                     "CUDA_VISIBLE_DEVICES=0,1", "HVDLITE_GPU_OPERATIONS=host", "hvdliterun -H host:2"):
            assert part in text, (part, text)
    else:
        raise AssertionError("a layout that shares GPUs was accepted")
    # Every rank leaves together: a rank that finished and shut down first
    # would shut down a slower one before its own refusal (ShutdownError at
    # its call instead of the ValueError checked above).
    core.wait(core.enqueue(op=int(OpType.JOIN), name="__join"), int(DataType.INT32))


def shared_gpu():
    try:
        allreduce("x", 1.0)
    except HvdliteInternalError as error:
        text = str(error)
        parts = ["two ranks of one NCCL communicator are on the same GPU", "HVDLITE_GPU_OPERATIONS=host",
                 "Fake GPU MIG" if MODE == "mig" else "(Fake GPU 2, GPU-", ", PCI "]
        for part in parts + [f"rank {r} on its GPU 0" for r in range(size)]:
            assert part in text, (part, text)
    else:
        raise AssertionError("two ranks on one GPU were accepted")
    # NCCL was never asked to make the communicator (it would say only
    # "invalid usage").
    assert nccl.fake_nccl_last_comm_device() == -1, nccl.fake_nccl_last_comm_device()


{"one_each": each_rank_on_its_own_gpu, "all": each_rank_on_its_own_gpu, "too_few": too_few,
 "shared": shared_gpu, "mig": shared_gpu}[MODE]()
print(f"{MODE} OK", flush=True)
