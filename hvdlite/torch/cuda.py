"""CUDA tensors for the core's NCCL path: the stream that orders its work with
PyTorch's (Note [Device ordering] in csrc/transport/device_communicator.h),
and outputs the core allocated on the GPU, handed to PyTorch without a copy."""
import torch

# __cuda_array_interface__ type strings; bfloat16 has none and travels as
# int16, and so does uint16 (torch 2.3+), which torch may not read from one.
_TYPESTR = {torch.uint8: "|u1", torch.int8: "|i1", torch.int16: "<i2", torch.int32: "<i4",
            torch.int64: "<i8", torch.float16: "<f2", torch.float32: "<f4",
            torch.float64: "<f8", torch.bool: "|b1"}
_AS_INT16 = {torch.bfloat16} | ({torch.uint16} if hasattr(torch, "uint16") else set())


def current_stream(device):
    """The stream PyTorch queues work on for `device`, as the core takes it:
    NCCL waits for everything queued on it so far before reading a tensor
    (so a tensor must not be changed before its handle is synchronized, as
    in Horovod), and it waits for NCCL's result before what is queued next."""
    return torch.cuda.current_stream(device).cuda_stream


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
    carrier = torch.int16 if dtype in _AS_INT16 else dtype
    tensor = torch.as_tensor(_DeviceArray(output, shape, _TYPESTR[carrier]),
                             device=torch.device("cuda", output.device))
    return tensor.view(dtype) if carrier is not dtype else tensor
