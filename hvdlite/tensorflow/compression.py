"""Compression for allreduce, Horovod's interface: compress(tensor) returns
(tensor to send, context) and decompress(tensor, context) undoes it.
fp16 and bf16 halve the bytes of float32/float64 tensors on the wire; the
casting logic is common/compression.py's, shared with torch and JAX.
Compression.powersgd(...) is the low-rank compression of
DistributedGradientTape and the optimizers (hvdlite/tensorflow/powersgd.py)."""
import tensorflow as tf

from hvdlite.common.compression import cast_compression
from hvdlite.tensorflow.powersgd import PowerSGD

Compression = cast_compression(lambda dtype: dtype.is_floating, tf.cast,
                               tf.float16, tf.bfloat16, __name__)
FP16Compressor = Compression.fp16
BF16Compressor = Compression.bf16
Compression.powersgd = PowerSGD
