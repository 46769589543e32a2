"""Compression for allreduce, Horovod's interface: compress(tensor) returns
(tensor to send, context) and decompress(tensor, context) undoes it.
fp16 and bf16 halve the bytes of float32/float64 tensors on the wire; the
casting logic is common/compression.py's, shared with torch and JAX."""
import tensorflow as tf

from hvdlite.common.compression import CastCompressor, cast_compression


class _TensorFlowCast(CastCompressor):
    @staticmethod
    def is_floating(dtype):
        return dtype.is_floating

    @staticmethod
    def cast(tensor, dtype):
        return tf.cast(tensor, dtype)


Compression = cast_compression(_TensorFlowCast, tf.float16, tf.bfloat16,
                               "hvd.Compression.none / .fp16 (Horovod's names) and .bf16.")
FP16Compressor = Compression.fp16
BF16Compressor = Compression.bf16
