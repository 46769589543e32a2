"""Compression for allreduce, Horovod's interface: compress(tensor) returns
(tensor to send, context) and decompress(tensor, context) undoes it.
fp16 and bf16 halve the bytes of float32/float64 tensors on the wire.
Compression.powersgd(...) is DistributedOptimizer's low-rank compression
(hvdlite/torch/powersgd.py)."""
import torch

from hvdlite.common.compression import cast_compression
from hvdlite.torch.powersgd import PowerSGD

Compression = cast_compression(lambda dtype: dtype.is_floating_point,
                               lambda tensor, dtype: tensor.to(dtype),
                               torch.float16, torch.bfloat16, __name__)
# Called for an instance (it keeps state per optimizer), unlike the others.
Compression.powersgd = PowerSGD
FP16Compressor = Compression.fp16
BF16Compressor = Compression.bf16
