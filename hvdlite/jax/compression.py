"""Compression for allreduce on JAX arrays, Horovod's interface: compress(x)
returns (array to send, context), decompress(x, context) undoes it. The casts
are jnp operations, so inside jax.jit they join the compiled step and the host
sees the narrower array."""
import jax.numpy as jnp

from hvdlite.common.compression import CastCompressor, cast_compression


class _JaxCast(CastCompressor):
    @staticmethod
    def is_floating(dtype):
        return jnp.issubdtype(dtype, jnp.floating)

    @staticmethod
    def cast(tensor, dtype):
        return tensor.astype(dtype)


Compression = cast_compression(_JaxCast, jnp.float16, jnp.bfloat16,
                               "hvd.Compression.none / .fp16 (Horovod's names) and .bf16.")
FP16Compressor = Compression.fp16
BF16Compressor = Compression.bf16
