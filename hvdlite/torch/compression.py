"""Compression for allreduce, Horovod's interface: compress(tensor) returns
(tensor to send, context) and decompress(tensor, context) undoes it.
fp16 and bf16 halve the bytes of float32/float64 tensors on the wire."""
import torch

from hvdlite.common.compression import CastCompressor, cast_compression


class _TorchCast(CastCompressor):
    @staticmethod
    def is_floating(dtype):
        return dtype.is_floating_point

    @staticmethod
    def cast(tensor, dtype):
        return tensor.to(dtype)


Compression = cast_compression(_TorchCast, torch.float16, torch.bfloat16,
                               "hvd.Compression.none / .fp16 (Horovod's names) and .bf16.")
FP16Compressor = Compression.fp16
BF16Compressor = Compression.bf16
