"""torch tensors <-> what the core takes (pointer, dtype code, shape, device)
and gives back (output bytes it allocated)."""
import numpy as np
import torch

from hvdlite.common.ops import DataType
from hvdlite.common.requests import unsupported_dtype

DTYPE_CODES = {
    torch.uint8: int(DataType.UINT8),
    torch.int8: int(DataType.INT8),
    torch.int32: int(DataType.INT32),
    torch.int64: int(DataType.INT64),
    torch.float16: int(DataType.FLOAT16),
    torch.bfloat16: int(DataType.BFLOAT16),
    torch.float32: int(DataType.FLOAT32),
    torch.float64: int(DataType.FLOAT64),
    torch.bool: int(DataType.BOOL),
    torch.int16: int(DataType.INT16),
}
# torch.uint16 exists from torch 2.3 on; its arithmetic is mostly missing, but
# the collectives only move and view its bytes, which it supports.
if hasattr(torch, "uint16"):
    DTYPE_CODES[torch.uint16] = int(DataType.UINT16)


def dtype_code(tensor, kind, name):
    """The core's code for tensor's dtype; ValueError naming the tensor if it has none."""
    code = DTYPE_CODES.get(tensor.dtype)
    if code is None:
        raise unsupported_dtype(kind, name, tensor.dtype)
    return code


def device_index(tensor, what):
    """-1 for CPU tensors, the GPU index for CUDA ones (the core decides
    whether it can serve that GPU); ValueError for any other device."""
    if tensor.is_cpu:
        return -1
    if tensor.is_cuda:
        return tensor.device.index if tensor.device.index is not None else \
            torch.cuda.current_device()
    raise ValueError(f"{what}: the tensor is on device '{tensor.device}'; hvdlite takes CPU "
                     f"and CUDA tensors; move it with .cpu() or .cuda() first")


def check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided:
        raise ValueError(f"{what}: {tensor.layout} tensors are not supported; pass a dense "
                         f"tensor (e.g. tensor.to_dense())")


def from_core_output(raw, shape, dtype):
    """The core's output bytes (a NumPy uint8 array that owns them, or a
    DeviceOutput for CUDA tensors) as a tensor of `dtype` and `shape`,
    without copying."""
    if not isinstance(raw, np.ndarray):
        from hvdlite.torch import cuda
        return cuda.from_device_output(raw, shape, dtype)
    if raw.size == 0:  # torch cannot reinterpret an empty byte tensor's dtype
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(raw).view(dtype).view(shape)
