"""The core's CUDA path on any number of ranks over the fake CUDA runtime and
NCCL of tests/common/fake_gpu (host memory plays device memory): every
collective, even and uneven parts, fusion, scaling folded into NCCL or done on
the host, a joined rank's neutral values, device outputs, and the event/stream
calls. Each result is compared with the same operation on CPU tensors.
Prints "cuda path OK"."""
import ctypes
import os

import numpy as np

import hvdlite.common.basics as basics
from hvdlite.common import init
from hvdlite.common.exceptions import HvdliteInternalError
from hvdlite.common.ops import DataType, OpType, ReduceOp
from fake_device import output_of

cudart = ctypes.CDLL(os.environ["HVDLITE_CUDART_LIBRARY"])  # the very copy the core loaded
nccl = ctypes.CDLL(os.environ["HVDLITE_NCCL_LIBRARY"])
for fn in ("fake_cuda_waits_by", "fake_cuda_waits_for"):
    getattr(cudart, fn).argtypes = [ctypes.c_void_p]
    getattr(cudart, fn).restype = ctypes.c_long
cudart.fake_cuda_live_allocations.restype = ctypes.c_long
cudart.fake_cuda_copies.restype = ctypes.c_long
cudart.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
cudart.cudaEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

CODES = {np.dtype(np.float32): DataType.FLOAT32, np.dtype(np.float64): DataType.FLOAT64,
         np.dtype(np.int32): DataType.INT32, np.dtype(np.int64): DataType.INT64,
         np.dtype(np.bool_): DataType.BOOL, np.dtype(np.int16): DataType.INT16,
         np.dtype(np.uint16): DataType.UINT16}

def _new(create):
    handle = ctypes.c_void_p()
    assert create(ctypes.byref(handle), 0) == 0
    return handle.value


# The framework's stream and ready event, as the fake runs them: work on the
# NCCL stream completes later, so results are read after synchronizing STREAM.
STREAM = _new(cudart.cudaStreamCreateWithFlags)
EVENT = _new(cudart.cudaEventCreateWithFlags)
DEVICE_TO_HOST = 2

init()
core = basics.core()
rank, size = basics.rank(), basics.size()
DEV = basics.local_rank()  # one (fake) GPU per rank, as NCCL requires
device_ops = 0


def start(op, name, x, out=None, device=DEV, **kwargs):
    global device_ops
    device_ops += device >= 0
    gpu = dict(stream=STREAM, ready_event=EVENT) if device >= 0 else {}
    if device >= 0:
        cudart.cudaEventRecord(EVENT, STREAM)
    return core.enqueue(op=int(op), name=f"{name}.{'cuda' if device >= 0 else 'cpu'}",
                        input=x.ctypes.data, output=output_of(op, x, out),
                        dtype=int(CODES[x.dtype]), shape=list(x.shape), device=device, **gpu,
                        **kwargs)


def finish(handle, x):
    result = core.wait(handle, int(CODES[x.dtype]))
    cudart.cudaStreamSynchronize(STREAM)  # the done event fired: results are in place
    return result


def as_array(raw, shape, dtype):
    """An output the core allocated: a DeviceOutput (host memory under the
    fake), or the CPU path's NumPy bytes."""
    count = int(np.prod(shape))
    if isinstance(raw, np.ndarray):
        return raw.view(dtype)[:count].reshape(shape).copy()
    memory = (ctypes.c_char * max(raw.nbytes, 1)).from_address(raw.data_ptr)
    return np.frombuffer(memory, dtype=dtype, count=count).reshape(shape).copy()


def same_shape(op, name, x, **kwargs):
    """(CUDA result, CPU result) of an op whose output has x's shape."""
    results = []
    for device in (DEV, -1):
        out = np.zeros_like(x)
        finish(start(op, name, x, out, device=device, **kwargs), x)
        results.append(out)
    return results


def allocated(op, name, x, **kwargs):
    """(CUDA (array, splits), CPU (array, splits)) of an op whose output the core allocates."""
    results = []
    for device in (DEV, -1):
        raw, shape, received, _ = finish(start(op, name, x, device=device, **kwargs), x)
        results.append((as_array(raw, shape, x.dtype), received))
    return results


def check(name, got, want):
    assert got.shape == want.shape and np.allclose(got, want), f"{name}: {got} != {want}"


x = (np.arange(6, dtype=np.float32).reshape(2, 3) + rank)
copies_before = cudart.fake_cuda_copies(DEVICE_TO_HOST)
check("average", *same_shape(OpType.ALLREDUCE, "avg", x, reduce_op=int(ReduceOp.Average),
                             prescale=2.0, postscale=3.0))
assert cudart.fake_cuda_copies(DEVICE_TO_HOST) == copies_before, "a folded scale went to the host"
check("int average", *same_shape(OpType.ALLREDUCE, "int_avg", np.array([2, 4, 7], np.int32) * (rank + 1),
                                 reduce_op=int(ReduceOp.Average), postscale=0.5))
assert cudart.fake_cuda_copies(DEVICE_TO_HOST) > copies_before
check("min", *same_shape(OpType.ALLREDUCE, "min", np.array([1.5, -2.0]) * (rank + 1),
                         reduce_op=int(ReduceOp.Min), prescale=2.0))
check("product", *same_shape(OpType.ALLREDUCE, "prod", np.array([2, -3], np.int64) + rank,
                             reduce_op=int(ReduceOp.Product)))
check("bool or", *same_shape(OpType.ALLREDUCE, "flags", np.array([rank == 0, False, True]),
                             reduce_op=int(ReduceOp.Sum)))

# Many small tensors started together: fused on the device and unpacked.
tensors = [np.full(5 + k, k + rank, np.float32) for k in range(8)]
handles = [start(OpType.ALLREDUCE, f"fused.{k}", t, reduce_op=int(ReduceOp.Sum), postscale=0.5)
           for k, t in enumerate(tensors)]
for h, t in zip(handles, tensors):
    finish(h, t)
for k, t in enumerate(tensors):
    check(f"fused {k}", t, np.full(5 + k, 0.5 * sum(k + r for r in range(size)), np.float32))

# Allgather, even and uneven: outputs are device memory the core allocated.
live = cudart.fake_cuda_live_allocations()
for kind, rows in (("even", 2), ("uneven", rank + 1)):
    g = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) + 10 * rank
    (cuda, _), (cpu, _) = allocated(OpType.ALLGATHER, f"gather_{kind}", g)
    check(f"allgather of {kind} rows", cuda, cpu)
del cuda
assert cudart.fake_cuda_live_allocations() == live, "a device output was not freed"

check("broadcast", *same_shape(OpType.BROADCAST, "bcast", np.array([7, 8, 9], np.int32) * (rank + 1),
                               root_rank=size - 1))

# Alltoall: rank r sends p + 1 rows to rank p (grouped send/recv, even to itself).
rows = size * (size + 1) // 2
a = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) + 100 * rank
(cuda, got), (cpu, want) = allocated(OpType.ALLTOALL, "a2a", a, splits=list(range(1, size + 1)))
check("alltoall", cuda, cpu)
assert got == want == [rank + 1] * size, (got, want)

# Reducescatter: even and uneven rows, a scale folded into the sum, and an average.
for rows in (2 * size, 2 * size + 1):
    r = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (rank + 1)
    (cuda, _), (cpu, _) = allocated(OpType.REDUCESCATTER, f"rs{rows}", r,
                                    reduce_op=int(ReduceOp.Sum), prescale=0.5)
    check(f"reducescatter of {rows} rows", cuda, cpu)
    (cuda, _), (cpu, _) = allocated(OpType.REDUCESCATTER, f"rs_avg{rows}", r,
                                    reduce_op=int(ReduceOp.Average))
    check(f"reducescatter average of {rows} rows", cuda, cpu)

# 16-bit integers: allgather, broadcast and alltoall move bytes and take them;
# NCCL has no 16-bit integer type to reduce with, so allreduce and
# reducescatter refuse them in the caller's thread, on every rank alike (as
# Horovod does), before anything is queued.
for dtype in (np.int16, np.uint16):
    tag = np.dtype(dtype).name
    rows = size * (size + 1) // 2  # the alltoall below sends p + 1 rows to rank p
    v = np.arange(rows * 2, dtype=dtype).reshape(rows, 2) * (rank + 1)
    check(f"broadcast {tag}", *same_shape(OpType.BROADCAST, f"bcast.{tag}", v, root_rank=size - 1))
    (cuda, _), (cpu, _) = allocated(OpType.ALLGATHER, f"gather.{tag}", v[:rank + 1])
    check(f"allgather {tag}", cuda, cpu)
    assert cuda.dtype == dtype and cuda.shape == (size * (size + 1) // 2, 2), cuda
    (cuda, got), (cpu, want) = allocated(OpType.ALLTOALL, f"a2a.{tag}", v,
                                         splits=list(range(1, size + 1)))
    check(f"alltoall {tag}", cuda, cpu)
    for op in (OpType.ALLREDUCE, OpType.REDUCESCATTER):
        name = f"{op.name.lower()}.{tag}"
        try:
            core.enqueue(op=int(op), name=name, input=v.ctypes.data, output=v.ctypes.data,
                         dtype=int(CODES[v.dtype]), shape=list(v.shape), device=0,
                         reduce_op=int(ReduceOp.Sum), stream=STREAM, ready_event=EVENT)
            raise AssertionError(f"a CUDA {tag} {op.name} was accepted")
        except ValueError as error:
            for needle in (f"{op.name.lower()} of '{name}': the {tag} tensor is on GPU 0 (rank {rank})",
                           f"NCCL has no {tag} type to reduce with", "int32"):
                assert needle in str(error), (needle, str(error))
    # The same tensor on the CPU reduces.
    out = np.zeros_like(v)
    finish(start(OpType.ALLREDUCE, f"sum.{tag}", v, out, device=-1, reduce_op=int(ReduceOp.Sum)), v)
    check(f"cpu allreduce {tag}", out, np.arange(rows * 2, dtype=dtype).reshape(rows, 2) * rows)

# A rank that joined takes part with neutral values; Average divides by the
# whole set, as in Horovod (DESIGN.md; HVDLITE_JOIN_AVERAGE_ACTIVE=1 opts out).
if size > 1:
    if rank == size - 1:
        finish(core.enqueue(op=int(OpType.JOIN), name="__join"), np.zeros(1, np.int32))
    else:
        y = np.full(4, float(rank + 1), np.float32)
        check("average without the joined rank", *same_shape(OpType.ALLREDUCE, "after_join", y,
                                                              reduce_op=int(ReduceOp.Average)))
        finish(core.enqueue(op=int(OpType.JOIN), name="__join"), np.zeros(1, np.int32))

# Ordering: the NCCL stream waited for the ready event once per batch, and
# the framework's stream waited for NCCL once per batch (fused members share
# both: Note [One wait per stream]); scaled-sum operators are kept, one per
# (dtype, factor) (Note [Scaled-sum operators]), and none leaks at shutdown.
waits_for, waits_by = cudart.fake_cuda_waits_for(EVENT), cudart.fake_cuda_waits_by(STREAM)
assert waits_for == waits_by and 0 < waits_for <= device_ops, (waits_for, waits_by, device_ops)
kept_operators = nccl.fake_nccl_ops_outstanding()
assert 0 <= kept_operators <= 32, kept_operators

if size == 1:  # a fatal error: on one rank only, so that no peer is left waiting
    try:
        x = np.ones(2, np.float32)
        finish(core.enqueue(op=0, name="elsewhere", input=x.ctypes.data, output=x.ctypes.data,
                            dtype=int(DataType.FLOAT32), shape=[2], device=1), x)
        raise AssertionError("a tensor on GPU 1 was accepted")
    except HvdliteInternalError as error:
        assert "one GPU per rank" in str(error) and "torch.cuda.set_device" in str(error), error
basics.shutdown()
if size > 1:  # a clean shutdown destroys them before the communicator (one rank: see above)
    assert nccl.fake_nccl_ops_outstanding() == 0, nccl.fake_nccl_ops_outstanding()
print("cuda path OK")
