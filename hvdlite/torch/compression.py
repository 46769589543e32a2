"""Compression for allreduce, Horovod's interface: compress(tensor) returns
(tensor to send, context) and decompress(tensor, context) undoes it.
fp16 and bf16 halve the bytes of float32/float64 tensors on the wire."""
import torch

from hvdlite.common.compression import Compressor, NoneCompressor


class _CastCompressor(Compressor):
    """Sends floating-point tensors as `wire_dtype`, casts back afterwards;
    other dtypes pass unchanged."""
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire_dtype:
            return tensor.to(cls.wire_dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """float16 on the wire: 10 bits of mantissa, range up to 65504."""
    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """bfloat16 on the wire: float32's range, 7 bits of mantissa."""
    wire_dtype = torch.bfloat16


class Compression:
    """hvd.Compression.none / .fp16 (Horovod's names) and .bf16."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
