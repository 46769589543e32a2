"""CUDA tensors for the core's NCCL path: the stream that orders its work with
PyTorch's (Note [Device ordering] in csrc/transport/device_communicator.h),
and outputs allocated on the GPU by PyTorch's caching allocator for the core,
handed back without a copy."""
import torch

# __cuda_array_interface__ type strings; bfloat16 has none and travels as
# int16, and so does uint16 (torch 2.3+), which torch may not read from one.
_TYPESTR = {torch.uint8: "|u1", torch.int8: "|i1", torch.int16: "<i2", torch.int32: "<i4",
            torch.int64: "<i8", torch.float16: "<f2", torch.float32: "<f4",
            torch.float64: "<f8", torch.bool: "|b1"}
_AS_INT16 = {torch.bfloat16} | ({torch.uint16} if hasattr(torch, "uint16") else set())


def _stream_getter():
    """The cheapest way to read the current stream's handle: CUDA builds of
    PyTorch have the raw getter their compiled code uses (no torch.cuda.Stream
    object built per call); the public API otherwise."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


_raw_stream = _stream_getter()


def _first_stream(device):
    """current_stream's first call: registers the core's allocator and the
    consumer stream, then hands over to the plain getter for good."""
    global current_stream
    from hvdlite.common import basics
    from hvdlite.common.handles import table
    from hvdlite.common.requests import TORCH
    basics.core().set_device_allocator(allocate_output)
    table.set_consumer_stream(TORCH, _raw_stream)
    current_stream = _raw_stream
    return _raw_stream(device)


# The stream PyTorch queues work on for `device` (a cudaStream_t as an int),
# as the core takes it at enqueue: the core records an event on it and NCCL
# waits for that event (what is queued later, e.g. the rest of backward, runs
# alongside; a tensor must still not be changed before its handle is
# synchronized, as in Horovod). At synchronize(), the then-current stream and
# this one wait for the result (hvdlite/common/handles.py). Called on every
# CUDA collective: after the first call it is the raw getter itself.
current_stream = _first_stream


def _stream(handle, device):
    if handle == 0:
        return torch.cuda.default_stream(device)
    return torch.cuda.ExternalStream(handle, device=device)


def allocate_output(nbytes, device, stream, nccl_stream):
    """The core's allocator for CUDA memory (Note [Outputs from the
    framework's allocator] in csrc/api/session.h): `nbytes` from PyTorch's
    caching allocator on GPU `device`, as (owner tensor, address), for the
    outputs of allgather and alltoall (on the core's background thread),
    reducescatter (at the call) and the fusion buffers (background thread;
    both streams are NCCL's). Called with the GIL.

    The memory is allocated under the NCCL stream, which writes it, so a
    block PyTorch hands out is free in that stream's order; record_stream on
    the entry's stream (where the caller will use the output) keeps PyTorch
    from reusing it before that stream is done with it, once the tensor is
    freed. Allocating under the entry's stream instead would be wrong: the
    block could still be in use by kernels queued there after the enqueue,
    which NCCL does not wait for (its ready event is older)."""
    device = torch.device("cuda", device)
    with torch.cuda.stream(_stream(nccl_stream, device)):
        owner = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
    owner.record_stream(_stream(stream, device))
    return owner, owner.data_ptr()


class _DeviceArray:
    """A DeviceOutput seen through __cuda_array_interface__; the tensor made
    from it keeps it (and so the GPU memory) alive."""

    def __init__(self, output, shape, typestr):
        self._output = output
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (output.data_ptr, False), "version": 2}


def from_device_output(output, shape, dtype):
    """The core's GPU output (a DeviceOutput) as a tensor of `dtype` and
    `shape` on the GPU that holds it, without copying."""
    if any(d == 0 for d in shape):
        return torch.empty(shape, dtype=dtype, device=torch.device("cuda", output.device))
    owner = output.owner
    if isinstance(owner, torch.Tensor):  # from allocate_output
        return owner[:output.nbytes].view(dtype).view(shape)
    carrier = torch.int16 if dtype in _AS_INT16 else dtype
    tensor = torch.as_tensor(_DeviceArray(output, shape, _TYPESTR[carrier]),
                             device=torch.device("cuda", output.device))
    return tensor.view(dtype) if carrier is not dtype else tensor
