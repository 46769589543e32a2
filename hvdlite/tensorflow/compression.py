"""Gradient compression for allreduce: cast to a smaller type for the wire,
back to the original type afterwards."""
import tensorflow as tf

from hvdlite.common.compression import Compressor, NoneCompressor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes); others unchanged."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """Horovod's names: hvd.Compression.none and hvd.Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor
