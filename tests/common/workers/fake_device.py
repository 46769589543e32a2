"""What the fake-GPU workers share: ctypes handles on the fake CUDA runtime and
NCCL the core loaded (the same files, so the same copies: tests/common/fake_gpu),
their memory seen through NumPy, and calls into the core with raw pointers.

Import after hvdlite.common.init(): Caller needs the running core."""
import ctypes
import os

import numpy as np

from hvdlite.common import basics
from hvdlite.common.ops import DataType, OpType

cudart = ctypes.CDLL(os.environ["HVDLITE_CUDART_LIBRARY"])
_nccl_path = os.environ.get("HVDLITE_NCCL_LIBRARY", "")
nccl = ctypes.CDLL(_nccl_path) if os.path.exists(_nccl_path) else None

for _fn in ("cudaStreamSynchronize", "cudaStreamDestroy"):
    getattr(cudart, _fn).argtypes = [ctypes.c_void_p]
cudart.cudaSetDevice.argtypes = [ctypes.c_int]
cudart.cudaEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
cudart.cudaStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
cudart.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.c_void_p]
cudart.cudaStreamBeginCapture.argtypes = [ctypes.c_void_p, ctypes.c_int]
cudart.cudaStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
cudart.cudaThreadExchangeStreamCaptureMode.argtypes = [ctypes.POINTER(ctypes.c_int)]
for _fn in ("fake_cuda_calls", "fake_cuda_races", "fake_cuda_batches", "fake_cuda_waits_by",
            "fake_cuda_invalidated_captures", "fake_cuda_copies", "fake_cuda_events_created"):
    getattr(cudart, _fn).restype = ctypes.c_long
cudart.fake_cuda_waits_by.argtypes = [ctypes.c_void_p]
cudart.fake_cuda_race_report.restype = ctypes.c_char_p
cudart.fake_cuda_context_report.restype = ctypes.c_char_p
cudart.fake_cuda_fill_later.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_float,
                                        ctypes.c_long]
cudart.fake_cuda_kernel_write.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_float]
cudart.fake_cuda_kernel_read.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
if nccl is not None:
    nccl.fake_nccl_calls.restype = ctypes.c_long
    nccl.fake_nccl_misuse_report.restype = ctypes.c_char_p

HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE = 1, 2, 3
NON_BLOCKING = 1
CODES = {np.dtype(np.float32): DataType.FLOAT32, np.dtype(np.float64): DataType.FLOAT64,
         np.dtype(np.float16): DataType.FLOAT16, np.dtype(np.int32): DataType.INT32,
         np.dtype(np.int16): DataType.INT16}


def new_stream(flags=0):
    handle = ctypes.c_void_p()
    assert cudart.cudaStreamCreateWithFlags(ctypes.byref(handle), flags) == 0
    return handle.value


def new_event():
    handle = ctypes.c_void_p()
    assert cudart.cudaEventCreateWithFlags(ctypes.byref(handle), 0) == 0
    return handle.value


def pinned(count, dtype):
    """Host memory the fake copies in stream order (cudaMallocHost)."""
    pointer = ctypes.c_void_p()
    nbytes = count * np.dtype(dtype).itemsize
    assert cudart.cudaMallocHost(ctypes.byref(pointer), ctypes.c_size_t(nbytes)) == 0
    return np.frombuffer((ctypes.c_char * nbytes).from_address(pointer.value), dtype=dtype)


def device_array(count, dtype):
    """"Device" memory (cudaMalloc) seen through NumPy. Host code reading or
    writing it directly is not seen by the race detector; kernels are."""
    pointer = ctypes.c_void_p()
    nbytes = count * np.dtype(dtype).itemsize
    assert cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(max(nbytes, 1))) == 0
    return np.frombuffer((ctypes.c_char * nbytes).from_address(pointer.value), dtype=dtype)


def read_on(stream, array):
    """What a kernel on `stream`, queued now, reads in `array` (a checked
    read: unordered after the array's last write, it is a race)."""
    host = np.empty_like(array)
    assert cudart.fake_cuda_kernel_read(stream, array.ctypes.data, array.nbytes, host.ctypes.data) == 0
    cudart.cudaStreamSynchronize(stream)
    return host


def write_on(stream, array, value):
    """A kernel on `stream` that writes `value` into a float32 array, later."""
    assert cudart.fake_cuda_kernel_write(stream, array.ctypes.data, array.size, value) == 0


def current_device():
    device = ctypes.c_int(-1)
    assert cudart.cudaGetDevice(ctypes.byref(device)) == 0
    return device.value


def races():
    """(number of races the fake recorded, their report)."""
    return cudart.fake_cuda_races(), (cudart.fake_cuda_race_report() or b"").decode()


def assert_no_races(what):
    count, report = races()
    assert count == 0, f"{what}: {count} race(s) on the fake GPU:\n{report}"


# Their output is sized by negotiation: the core allocates it unless a caller's
# buffer is given (api.h output + output_bytes).
SIZED_BY_NEGOTIATION = {int(OpType.ALLGATHER), int(OpType.ALLTOALL), int(OpType.REDUCESCATTER)}


def output_of(op, x, out=None):
    """The request's output pointer: `out`'s, else the input's (in place), or
    0 for an op whose output the core allocates."""
    if out is not None:
        return out.ctypes.data
    return 0 if int(op) in SIZED_BY_NEGOTIATION else x.ctypes.data


class Caller:
    """Raw core requests on fake device memory from one rank's GPU and stream."""

    def __init__(self, device, stream):
        self.core = basics.core()
        self.device = device
        self.stream = stream

    def start(self, op, name, x, out=None, dtype=None, ready_event=0, stream=None, **kwargs):
        code = dtype if dtype is not None else int(CODES[x.dtype])
        return self.core.enqueue(op=int(op), name=name, input=x.ctypes.data,
                                 output=output_of(op, x, out), dtype=code,
                                 shape=list(x.shape), device=self.device,
                                 stream=self.stream if stream is None else stream,
                                 ready_event=ready_event, **kwargs)

    def finish(self, handle, code=int(DataType.FLOAT32)):
        """Waits (the handle's own stream is ordered after it), then the host
        waits for that stream, so the host may read the result."""
        result = self.core.wait(handle, code)
        cudart.cudaStreamSynchronize(self.stream)
        return result
